"""Section ``batched`` (a): our batched generation against one HF ``generate`` per sample.

The per-sample loop is what the original research ran: one ``model.generate`` call per
sample with the hook applied by ``SteeringVector.apply``. It is timed on a stratified
subset and its tokens/s extrapolated. Ours one row at a time runs on the same subset, to
separate batching from the implementation. ``run_batched`` is also the timed pass the
dtype, tuning and scaling sections repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import takewhile
from typing import Any, cast

import torch

from experiments.bench.core.measure import Measurement, rounded, speedup, timed_pass
from experiments.bench.core.workload import Workload, batches_of
from experiments.execution.local import is_unsteered
from steering.generation import (
    BatchStats,
    Generation,
    GenerationRow,
    eos_ids,
    generate_batch,
    suppressed_ids,
)
from steering.models import LoadedModel
from steering.sampling import SamplingConfig


def generate_ours(
    lm: LoadedModel,
    wl: Workload,
    batch: Sequence[GenerationRow],
    sampling: SamplingConfig | None = None,
) -> tuple[list[Generation], BatchStats]:
    """One batch as ``make run`` generates it: log-probs only for the unsteered rows."""
    return generate_batch(
        lm,
        batch,
        wl.directions,
        wl.layer,
        wl.mode,
        sampling or wl.sampling,
        logprobs_for=[is_unsteered(r, None) for r in batch],
    )


def run_batched(
    lm: LoadedModel,
    wl: Workload,
    rows: Sequence[GenerationRow] | None = None,
    batch_size: int | None = None,
    m: Measurement | None = None,
) -> Measurement:
    """One timed pass of our batched generation over ``rows`` (default: all); appends a repeat."""
    rows = list(wl.rows if rows is None else rows)
    m = m or Measurement(rows=len(rows))
    batches = batches_of(lm, rows, batch_size or wl.batch_size)
    gens: list[Generation] = []

    def work() -> int:
        tokens = 0
        for batch in batches:
            out, stats = generate_ours(lm, wl, batch)
            gens.extend(out)
            tokens += stats.new_tokens
        return tokens

    timed_pass(lm.device, m, work)
    m.generations = gens
    return m


def hf_sampling_kwargs(lm: LoadedModel, wl: Workload) -> dict[str, Any]:
    """``model.generate`` settings equal to ours: the token count, greedy or top-p sampling
    with HF's default top_k=50 turned off, and the tokens our sampler never emits."""
    s = wl.sampling
    kwargs: dict[str, Any] = {
        "max_new_tokens": s.max_new_tokens,
        "pad_token_id": lm.tokenizer.pad_token_id,
        "suppress_tokens": suppressed_ids(lm),
    }
    if s.greedy:
        kwargs["do_sample"] = False
    else:
        kwargs.update(do_sample=True, top_p=s.top_p, temperature=s.temperature, top_k=0)
    return kwargs


def strip_eos(lm: LoadedModel, new: list[int]) -> list[int]:
    """New token ids up to (not including) the first EOS: ours does not count it either."""
    eos = set(eos_ids(lm))
    return list(takewhile(lambda t: t not in eos, new))


def hf_generate_one(lm: LoadedModel, wl: Workload, row: GenerationRow) -> tuple[str, int]:
    """The original research's way: one ``model.generate`` per sample, hook via ``apply``."""
    tok = lm.tokenizer
    enc = tok(row.prompt, return_tensors="pt").to(lm.device)
    torch.manual_seed(row.seed)
    with wl.vectors[row.direction].apply(lm, wl.strengths[row.key]):
        # generate comes with GenerationMixin, which the concrete model classes mix in
        out = lm.model.generate(**enc, **hf_sampling_kwargs(lm, wl))  # type: ignore[operator]
    new = strip_eos(lm, out[0, enc["input_ids"].shape[1] :].tolist())
    return cast(str, tok.decode(new, skip_special_tokens=True)), len(new)  # one row


def run_per_sample(lm: LoadedModel, wl: Workload, rows: Sequence[GenerationRow]) -> Measurement:
    """The per-sample loop over ``rows``, timed as one repeat."""
    return timed_pass(
        lm.device,
        Measurement(rows=len(rows)),
        lambda: sum(hf_generate_one(lm, wl, row)[1] for row in rows),
    )


def warm_up(lm: LoadedModel, wl: Workload) -> None:
    """One-off costs (kernel selection, first allocations) kept out of every timing."""
    few = wl.rows[: min(4, len(wl.rows))]
    generate_ours(lm, wl, few, replace(wl.sampling, max_new_tokens=2))
    hf_generate_one(lm, wl.with_tokens(2), few[0])


def section_batched(
    wl: Workload,
    measured: dict[str, Measurement],
    ours: str,
    subset: Sequence[GenerationRow],
    other_dtypes: Sequence[str] = (),
) -> dict[str, Any]:
    """(a): batched (and the other dtype) against the per-sample HF loop, same rows."""
    batched = measured[ours]
    per_sample = measured["per_sample"]
    single = measured["one_row_at_a_time"]
    extrapolated = len(subset) < len(wl.rows)
    scale = len(wl.rows) / max(1, len(subset))
    per_sample.extra.update(
        {
            "timed_samples": len(subset),
            "of_samples": len(wl.rows),
            "extrapolated": extrapolated,
            "estimated_seconds_all_samples": rounded(sum(per_sample.seconds) * scale, 2),
            "how": "a loop of model.generate(do_sample=True, top_p, temperature, top_k=0, "
            "max_new_tokens, suppress_tokens) per sample, steered with "
            "SteeringVector.apply(lm, strength); "
            f"{len(subset)} stratified samples in {len(per_sample.seconds)} chunks, one between "
            "each pair of batched repeats; tokens/s is the median over chunks"
            + (" and is extrapolated to all samples" if extrapolated else ""),
        }
    )
    single.extra.update({"timed_samples": len(subset), "batch_size": 1})
    result = {
        "workload": wl.describe(),
        "dtype": ours,
        "batched": batched.to_dict(),
        "per_sample": per_sample.to_dict(),
        "ours_one_row_at_a_time": single.to_dict(),
        "ratio_batched_vs_per_sample": speedup(batched, per_sample),
        "ratio_one_row_at_a_time_vs_per_sample": speedup(single, per_sample),
    }
    for name in other_dtypes:  # the same rows in the other dtype, against the same loop
        result[f"ratio_batched_{name}_vs_per_sample_{ours}"] = speedup(measured[name], per_sample)
    return result
