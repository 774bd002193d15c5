"""Batched, seeded, steered generation with per-row strengths under the KV cache.

Every row of a batch carries its own prompt, direction, coefficient and seed, so the
whole grid (concepts × prompts × strengths) runs in a few forward passes.

Randomness is per row, not per batch: each row draws its uniforms from its own
``torch.Generator`` seeded by the caller, and samples by inverse CDF over the top-p
nucleus. A row's text therefore does not depend on which other rows share its batch
(so an interrupted run resumes to the same numbers), and rows that share a seed but
differ in strength use common random numbers, which makes the paired Δ_s − Δ_0
comparison far less noisy.

:func:`generate_batch` is the loop every device shares; how each step runs (cache,
sampler, host checks, graphs) is the model's decode policy (steering/decode.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import cast

import torch

from steering.decode import DecodeBatch, DecodePolicy
from steering.head import (
    BlockedHead,
    head_inputs,
    reused_logits,
    target_logprobs,
    target_logprobs_blocked,
)
from steering.memory import nll_logits_budget, vocab_size
from steering.models import LoadedModel
from steering.policies import policy_for

# re-exported (the "as" form): the sampler's old home, where callers still import them
from steering.sampling import PREFILTER_GROWTH as PREFILTER_GROWTH
from steering.sampling import TOPK_PREFILTER as TOPK_PREFILTER
from steering.sampling import SamplingConfig as SamplingConfig
from steering.sampling import sample_next as sample_next
from steering.scratch import Scratch
from steering.suffix import capture_layer_states, decoder_suffix, row_states, supports_suffix
from steering.vector import Layers, Mode, layer_shape, lowest_layer


@dataclass(frozen=True)
class GenerationRow:
    """One generation to make: ``direction`` indexes the directions tensor."""

    key: str
    prompt: str
    seed: int
    direction: int = 0
    coefficient: float = 0.0


@dataclass
class Generation:
    key: str
    prompt: str
    text: str
    token_ids: list[int]
    n_prompt_tokens: int
    stopped_at_eos: bool
    logprobs: list[float] = field(default_factory=list)  # empty unless asked for the row

    @property
    def n_new_tokens(self) -> int:
        return len(self.token_ids)


@dataclass
class BatchStats:
    rows: int = 0
    new_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    def add(self, other: BatchStats) -> None:
        self.rows += other.rows
        self.new_tokens += other.new_tokens
        self.seconds += other.seconds


def eos_ids(lm: LoadedModel) -> list[int]:
    ids: set[int] = set()
    gen_eos = getattr(getattr(lm.model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, getattr(lm.tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return sorted(ids)


def suppressed_ids(lm: LoadedModel) -> list[int]:
    """Tokens a text-only continuation never legitimately contains: padding, BOS, mask, unk and
    the multimodal image placeholders (the base Gemma 3 otherwise emits ``<start_of_image>``)."""
    tok = lm.tokenizer
    ids = {getattr(tok, f"{name}_token_id", None) for name in ("pad", "bos", "unk", "mask")}
    for token_id, added in getattr(tok, "added_tokens_decoder", {}).items():
        if "image" in str(added):
            ids.add(int(token_id))
    eos = set(eos_ids(lm))
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    return sorted(i for i in ids if i is not None and i not in eos and 0 <= i < vocab)


def prepare_batch(
    lm: LoadedModel,
    rows: Sequence[GenerationRow],
    directions: torch.Tensor | None,
    layer: Layers,
    mode: Mode,
    sampling: SamplingConfig,
    logprobs_for: Sequence[bool] | None = None,
) -> DecodeBatch:
    """Tokenise the prompts (left-padded) and draw every row's uniforms: what any policy
    decodes from. ``directions`` is ``[n, hidden]``, or ``[n, len(layer), hidden]`` when
    ``layer`` is several layers (steering.vector.steer_layers)."""
    tok = lm.tokenizer
    tok.padding_side = "left"
    enc = tok([r.prompt for r in rows], return_tensors="pt", padding=True).to(lm.device)
    mask = enc["attention_mask"]
    n_rows = len(rows)
    eos = torch.tensor(eos_ids(lm) or [-1], device=lm.device)
    if logprobs_for is not None and len(logprobs_for) != n_rows:
        raise ValueError(f"logprobs_for has {len(logprobs_for)} entries for {n_rows} rows")
    if directions is None:
        directions = torch.zeros(1, *layer_shape(layer), lm.hidden_size)
    steps = sampling.max_new_tokens
    seeded = [torch.Generator().manual_seed(r.seed) for r in rows]
    return DecodeBatch(
        input_ids=enc["input_ids"],
        attention_mask=mask,
        positions=(mask.cumsum(dim=-1) - 1).clamp(min=0),
        u=torch.stack([torch.rand(steps, generator=g) for g in seeded]).to(lm.device),
        eos=eos,
        banned=torch.tensor(suppressed_ids(lm), dtype=torch.long, device=lm.device),
        pad_id=tok.pad_token_id if tok.pad_token_id is not None else int(eos[0]),
        row_dirs=directions[torch.tensor([r.direction for r in rows])],
        coefs=torch.tensor([r.coefficient for r in rows], dtype=torch.float32),
        layer=layer,
        mode=mode,
        sampling=sampling,
        lp_rows=None if logprobs_for is None else [i for i, w in enumerate(logprobs_for) if w],
    )


@torch.inference_mode()
def generate_batch(
    lm: LoadedModel,
    rows: Sequence[GenerationRow],
    directions: torch.Tensor | None,
    layer: Layers,
    mode: Mode,
    sampling: SamplingConfig,
    on_step: Callable[[int, int], None] | None = None,
    logprobs_for: Sequence[bool] | None = None,
    policy: DecodePolicy | None = None,
    layer_states: list[torch.Tensor | None] | None = None,
) -> tuple[list[Generation], BatchStats]:
    """Generate every row in one batch, each with its own steering coefficient.

    ``on_step(step, steps)`` is called after each decoding step, for progress displays.
    ``logprobs_for`` says per row whether to record its tokens' log-probabilities
    (default: every row; the others get an empty list). Each recorded row costs a
    log-softmax over the vocabulary per step, and the pipeline needs them only for its
    unsteered rows, whose NLL they are. ``policy`` overrides the model's decode policy
    (tests and the bench compare them). ``layer_states``, a list, receives per row the
    residual stream leaving ``layer`` (the lowest of several) before steering, at the
    positions that score its continuation (steering/suffix.py; for
    :func:`continuation_nll`'s ``states``).
    """
    start = time.perf_counter()
    policy = policy or policy_for(lm)
    batch = prepare_batch(lm, rows, directions, layer, mode, sampling, logprobs_for)
    steps, every = batch.steps, policy.eos_every
    captured: list[torch.Tensor] = []
    capture = (
        capture_layer_states(lm, lowest_layer(layer), captured)
        if layer_states is not None
        else nullcontext()
    )
    with capture, policy.decoder(lm, batch) as decoder:
        for step in range(steps):
            if on_step is not None:
                on_step(step, steps)
            decoder.step(step)
            if step % every == every - 1 and decoder.all_done():
                break
        state = decoder.state
        tokens_cpu, lengths_cpu = state.tokens.cpu(), state.lengths.cpu()
        lp_cpu = state.logprobs.cpu()

    tok = lm.tokenizer
    n_prompt = batch.attention_mask.sum(dim=-1).cpu()
    results = []
    wanted = set(range(batch.n_rows) if batch.lp_rows is None else batch.lp_rows)
    for i, row in enumerate(rows):
        n = int(lengths_cpu[i])
        ids = tokens_cpu[i, :n].tolist()
        results.append(
            Generation(
                key=row.key,
                prompt=row.prompt,
                text=cast(str, tok.decode(ids, skip_special_tokens=True)),  # ids: one row
                token_ids=ids,
                n_prompt_tokens=int(n_prompt[i]),
                stopped_at_eos=n < steps,
                logprobs=lp_cpu[i, :n].tolist() if i in wanted else [],
            )
        )
    if layer_states is not None:
        layer_states[:] = row_states(
            captured, [g.n_prompt_tokens for g in results], [len(g.token_ids) for g in results]
        )
    stats = BatchStats(len(rows), int(lengths_cpu[: len(rows)].sum()), time.perf_counter() - start)
    return results, stats


# The output head turns every position it keeps into a 262,144-entry row of logits (1 MiB in
# fp32 on the embedded model). Chunks of 32 rows x 51 positions materialised 1.7 GB of logits,
# and as much again for their log-softmax: a 7.6 GB peak for the perplexity check of the
# default grid. The head now runs only at positions that predict a continuation token, and
# each forward pass keeps at most this many logits (where the logits are materialised).
NLL_LOGITS_BUDGET = 1 << 26  # entries (256 MiB in fp32)
NLL_ROWS, NLL_CUDA_ROWS = 32, 256  # rows per forward pass at most, CPU and CUDA
# With the CPU's blocked head no logits row is ever whole (steering.head.target_logprobs_
# blocked): a pass holds [positions, 2 x 2,048] logits at most, so it takes a generation
# batch's rows at once (the decoder layers' products then run on thousands of positions).
NLL_BLOCKED_ROWS, NLL_BLOCKED_POSITIONS = 96, 8192


def _nll_chunks(lengths: Sequence[int], batch_size: int, max_positions: int) -> list[range]:
    """Consecutive rows per forward pass: at most ``batch_size`` rows holding at most
    ``max_positions`` continuation tokens together (a single row may hold more)."""
    chunks, start = [], 0
    while start < len(lengths):
        end, total = start + 1, lengths[start]
        while (
            end < len(lengths)
            and end - start < batch_size
            and total + lengths[end] <= max_positions
        ):
            total, end = total + lengths[end], end + 1
        chunks.append(range(start, end))
        start = end
    return chunks


@torch.inference_mode()
def continuation_nll(
    lm: LoadedModel,
    prompts: Sequence[str],
    continuations: Sequence[Sequence[int]],
    batch_size: int | None = None,
    logits_budget: int | None = None,
    states: Sequence[torch.Tensor | None] | None = None,
    from_layer: int | None = None,
) -> list[float | None]:
    """Mean negative log-likelihood of each continuation given its prompt, unsteered.

    exp() of it is the perplexity coherence check. Empty continuations give None.

    On the CPU's blocked head the log-probabilities come block by block from the final
    hidden states (:func:`~steering.head.target_logprobs_blocked`): no full-vocabulary
    row is built, and a pass takes up to 96 rows (8,192 positions), the rows sorted by
    length so little is padded. Elsewhere at most 32 rows (CPU) or 256 (CUDA) and
    ``NLL_LOGITS_BUDGET`` logits per pass (on a card what its free memory holds:
    steering/memory.py), each position's log-probability its logit minus the log-sum-exp
    computed in place on the kept logits (:func:`~steering.head.target_logprobs`).
    Either way a row's value does not depend on its neighbours beyond the float rounding
    of padded attention and of a blocked sum.

    With ``states`` (per row, the unsteered residual stream leaving decoder layer
    ``from_layer - 1`` at its prompt and continuation positions, as generation captured
    it: ``generate_batch(layer_states=...)``) a pass on the blocked head runs only the
    layers from ``from_layer`` on (steering/suffix.py), where the model supports it.
    """
    conts = [list(c) for c in continuations]
    out: list[float | None] = [None] * len(conts)
    todo = [i for i, c in enumerate(conts) if c]
    scratch = Scratch()
    with head_inputs(lm.model) as head:
        if head is not None:
            lengths = {i: len(lm.tokenizer(prompts[i])["input_ids"]) + len(conts[i]) for i in todo}
            todo.sort(key=lambda i: (lengths[i], i))
            rows = batch_size or NLL_BLOCKED_ROWS
            chunks = _nll_chunks([len(conts[i]) for i in todo], rows, NLL_BLOCKED_POSITIONS)
            if (
                states is not None
                and from_layer is not None
                and all(states[i] is not None for i in todo)
                and supports_suffix(lm)
            ):
                with decoder_suffix(lm, from_layer) as decoder:
                    for chunk in chunks:
                        rows_ = [todo[j] for j in chunk]
                        _chunk_nll_states(decoder, states, conts, rows_, out, scratch, head)
                return out
        else:
            if batch_size is None:
                batch_size = NLL_CUDA_ROWS if lm.platform.on_card else NLL_ROWS
            if logits_budget is None:
                logits_budget = nll_logits_budget(lm, NLL_LOGITS_BUDGET)
            positions = max(1, logits_budget // vocab_size(lm))
            chunks = _nll_chunks([len(conts[i]) for i in todo], batch_size, positions)
        with reused_logits(lm.model):  # each chunk is done with its logits before the next
            for chunk in chunks:
                _chunk_nll(lm, prompts, conts, [todo[j] for j in chunk], out, scratch, head)
    return out


def left_padded(
    seqs: Sequence[torch.Tensor], pad: int, scored: Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows (token ids, or states ``[length, hidden]``) left-padded with ``pad`` to the
    longest, their attention mask, each row's positions counted from its first real token,
    and the mask of each row's last ``scored[r]`` places (none without ``scored``)."""
    width, first = max(len(seq) for seq in seqs), seqs[0]
    shape = (len(seqs), width, *first.shape[1:])
    padded = torch.full(shape, pad, dtype=first.dtype, device=first.device)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    target = torch.zeros_like(attn, dtype=torch.bool)
    for r, (seq, n) in enumerate(zip(seqs, scored or [0] * len(seqs), strict=True)):
        padded[r, width - len(seq) :] = seq
        attn[r, width - len(seq) :] = 1
        target[r, width - n :] = True
    return padded, attn, (attn.cumsum(-1) - 1).clamp(min=0), target


def scored_outputs(
    lm: LoadedModel, seqs: Sequence[Sequence[int]], scored: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass over token sequences, left-padded: its output (logits, or the final
    hidden states inside :func:`~steering.head.head_inputs`) only at the positions that
    predict one of each row's last ``scored`` tokens, and those tokens, rows end to end."""
    rows = [torch.tensor(seq) for seq in seqs]
    ids, attn, pos, target = left_padded(rows, lm.tokenizer.pad_token_id, scored)
    predicts = torch.zeros_like(target)
    predicts[:, :-1] = target[:, 1:]  # position t predicts token t + 1
    predicts = predicts.to(lm.device)
    kept = lm.model(
        input_ids=ids.to(lm.device),
        attention_mask=attn.to(lm.device),
        position_ids=pos.to(lm.device),
        logits_to_keep=predicts,
    ).logits
    if kept.dim() == 3:  # a model that ignores a boolean logits_to_keep
        kept = kept[predicts]
    return kept, ids[target].to(lm.device)


def _row_means(
    token_lp: torch.Tensor, conts: list[list[int]], rows: list[int], out: list[float | None]
) -> None:
    """Each row's mean NLL into ``out``, from its continuation's token log-probs laid end
    to end in ``rows``' order."""
    offset = 0
    for i in rows:
        n = len(conts[i])
        out[i] = float(-token_lp[offset : offset + n].mean())
        offset += n


def _chunk_nll_states(
    decoder: torch.nn.Module,
    states: Sequence[torch.Tensor | None],
    conts: list[list[int]],
    rows: list[int],
    out: list[float | None],
    scratch: Scratch,
    head: BlockedHead,
) -> None:
    """:func:`_chunk_nll` from captured states: the decoder's upper layers (open in
    :func:`~steering.suffix.decoder_suffix`) over each row's prompt and continuation but
    its last token, left-padded, then the blocked head at the positions that predict a
    continuation token."""
    seqs = cast("list[torch.Tensor]", [states[i] for i in rows])  # rows with states
    hidden, attn, pos, predicts = left_padded(seqs, 0, [len(conts[i]) for i in rows])
    device = hidden.device
    final = decoder(
        inputs_embeds=hidden,
        attention_mask=attn.to(device),
        position_ids=pos.to(device),
        use_cache=False,
    ).last_hidden_state
    targets = torch.tensor([t for i in rows for t in conts[i]], device=device)
    token_lp = target_logprobs_blocked(final[predicts.to(device)], head, targets, scratch).cpu()
    _row_means(token_lp, conts, rows, out)


def _chunk_nll(
    lm: LoadedModel,
    prompts: Sequence[str],
    conts: list[list[int]],
    rows: list[int],
    out: list[float | None],
    scratch: Scratch,
    head: BlockedHead | None = None,
) -> None:
    """One forward pass over ``rows``: their mean NLLs go into ``out``. With ``head`` (open
    in :func:`~steering.head.head_inputs`) the pass returns hidden states, not logits."""
    # The output head only at the positions that predict a continuation token.
    seqs = [lm.tokenizer(prompts[i])["input_ids"] + conts[i] for i in rows]
    kept, targets = scored_outputs(lm, seqs, [len(conts[i]) for i in rows])
    if head is not None:
        token_lp = target_logprobs_blocked(kept, head, targets, scratch).cpu()
    else:
        token_lp = target_logprobs(kept.float(), targets).cpu()
    _row_means(token_lp, conts, rows, out)
