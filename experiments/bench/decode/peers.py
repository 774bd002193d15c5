"""Section ``peers``: every honest way to run the same grid, timed side by side.

The peer a hook-library user would write is Hugging Face ``generate`` on the whole batch
with a forward hook that adds row i's own coefficient x direction to row i (what
``steering-vectors`` does for one vector, widened to one per row), with the workload's
sampling settings. It runs on the same batches as ours. Beside it: one ``generate`` per
sample (section ``batched``), llama.cpp single stream (section ``llama``) and llama.cpp
with several sequences per batch (``llama_batch``), all against our batched run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, cast

import torch

from experiments.bench.core.measure import Measurement, ratio, rounded, timed_pass
from experiments.bench.core.options import HF_BATCHED
from experiments.bench.core.workload import Workload, batches_of
from experiments.bench.decode.batched import hf_sampling_kwargs, strip_eos
from steering.activations import layer_output_tensor
from steering.generation import Generation, GenerationRow, generate_batch
from steering.models import LoadedModel

HF_BATCHED_HOW = (
    "model.generate on each batch (the same batches as ours, left-padded), one forward hook "
    "on the steered layer adding coefficient_i x direction_i to row i at every position, "
    "the workload's sampling (top_p, temperature, top_k off, the same suppressed tokens); "
    "HF draws from one global generator seeded with the batch's first row seed, so sampled "
    "texts differ from ours while greedy texts are identical"
)


@contextmanager
def per_row_hook(
    lm: LoadedModel, layer: int, directions: torch.Tensor, coefficients: torch.Tensor, mode: str
) -> Iterator[None]:
    """A plain forward hook as a hook-library user writes it: row i of the layer's output
    gets its own edit, at every position (prompt, padding and generated tokens)."""
    d = directions[:, None, :]
    c = coefficients[:, None, None]

    def hook(_module: Any, _inputs: Any, output: Any) -> Any:
        hidden = output[0] if isinstance(output, tuple) else layer_output_tensor(output)
        dd, cc = d.to(hidden), c.to(hidden)
        if mode == "additive":
            hidden = hidden + cc * dd
        else:
            hidden = hidden + cc * (hidden * dd).sum(dim=-1, keepdim=True) * dd
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    handle = lm.layer(layer).register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@torch.inference_mode()
def hf_generate_batch(
    lm: LoadedModel, wl: Workload, rows: Sequence[GenerationRow]
) -> list[Generation]:
    """One ``model.generate`` over ``rows`` with the per-row hook; new tokens up to EOS."""
    tok = lm.tokenizer
    tok.padding_side = "left"
    enc = tok([r.prompt for r in rows], return_tensors="pt", padding=True).to(lm.device)
    directions = wl.directions[torch.tensor([r.direction for r in rows])]
    coefficients = torch.tensor([r.coefficient for r in rows], dtype=torch.float32)
    torch.manual_seed(rows[0].seed)
    with per_row_hook(lm, wl.layer, directions, coefficients, wl.mode):
        # generate comes with GenerationMixin, which the concrete model classes mix in
        out = lm.model.generate(**enc, **hf_sampling_kwargs(lm, wl))  # type: ignore[operator]
    width = enc["input_ids"].shape[1]
    n_prompt = enc["attention_mask"].sum(dim=-1).tolist()
    gens = []
    for i, row in enumerate(rows):
        new = out[i, width:].tolist()
        ids = strip_eos(lm, new)
        gens.append(
            Generation(
                key=row.key,
                prompt=row.prompt,
                text=cast(str, tok.decode(ids, skip_special_tokens=True)),  # one row
                token_ids=ids,
                n_prompt_tokens=int(n_prompt[i]),
                stopped_at_eos=len(ids) < len(new),
            )
        )
    return gens


def run_hf_batched(
    lm: LoadedModel,
    wl: Workload,
    rows: Sequence[GenerationRow] | None = None,
    m: Measurement | None = None,
) -> Measurement:
    """One timed pass of the HF batched peer over ``rows`` (default: all), as ours batches."""
    rows = list(wl.rows if rows is None else rows)
    m = m or Measurement(rows=len(rows))
    batches = batches_of(lm, rows, wl.batch_size)
    gens: list[Generation] = []

    def work() -> int:
        for batch in batches:
            gens.extend(hf_generate_batch(lm, wl, batch))
        return sum(g.n_new_tokens for g in gens)

    timed_pass(lm.device, m, work)
    m.generations = gens
    return m


def greedy_agreement(lm: LoadedModel, wl: Workload, n_rows: int, n_tokens: int) -> dict[str, Any]:
    """Ours and the HF peer on the same rows under greedy decoding: the token ids must be
    the same, which shows the peer does the same work (steering included)."""
    rows = wl.rows[:n_rows]
    greedy = replace(wl, sampling=replace(wl.sampling, greedy=True, max_new_tokens=n_tokens))
    ours, _ = generate_batch(lm, rows, wl.directions, wl.layer, wl.mode, greedy.sampling)
    theirs = hf_generate_batch(lm, greedy, rows)
    same = sum(a.token_ids == b.token_ids for a, b in zip(ours, theirs, strict=True))
    return {"rows": len(rows), "tokens": n_tokens, "identical": f"{same}/{len(rows)}"}


def _peer(m: Measurement | None, ours_rate: float | None, how: str) -> dict[str, Any]:
    if m is None:
        return {"skipped": how}
    return {
        **m.to_dict(),
        "ratio_ours_vs_peer": rounded(ratio(ours_rate, m.tokens_per_second), 3),
        "how": how,
    }


def section_peers(
    wl: Workload,
    measured: dict[str, Measurement],
    ours: str,
    agreement: dict[str, Any] | None,
    llama: dict[str, Any],
) -> dict[str, Any]:
    """Tokens/s of every peer on the same rows, seeds, strengths and token counts, and our
    batched run over each. ``llama`` holds the single-stream and multi-sequence entries
    (or why they were skipped)."""
    mine = measured[ours]
    rate = mine.tokens_per_second
    per_sample = measured.get("per_sample")
    peers = {
        HF_BATCHED: _peer(measured.get(HF_BATCHED), rate, HF_BATCHED_HOW),
        "hf_generate_per_sample": _peer(
            per_sample,
            rate,
            "one model.generate per sample with SteeringVector.apply (section batched), "
            "on a stratified subset"
            if per_sample
            else "section batched not run",
        ),
        "ours_one_row_at_a_time": _peer(
            measured.get("one_row_at_a_time"),
            rate,
            "generate_batch with batch size 1 on the per-sample subset",
        ),
    }
    for name, entry in llama.items():
        if "tokens_per_second" in entry:
            entry["ratio_ours_vs_peer"] = rounded(ratio(rate, entry["tokens_per_second"]), 3)
        peers[name] = entry
    return {
        "workload": wl.describe(),
        "ours": {**mine.to_dict(), "dtype": ours},
        "peers": peers,
        "greedy_agreement_hf_batched": agreement,
        "how": "all in one process, on the same model, rows (prompt, seed, direction, strength) "
        "and token counts; batched runs are interleaved repeat by repeat, single-stream "
        "ones timed in chunks between them",
    }
