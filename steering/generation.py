"""Batched, seeded, steered generation with per-row strengths under the KV cache.

Every row of a batch carries its own prompt, direction, coefficient and seed, so the
whole grid (concepts × prompts × strengths) runs in a few forward passes.

Randomness is per row, not per batch: each row draws its uniforms from its own
``torch.Generator`` seeded by the caller, and samples by inverse CDF over the top-p
nucleus. A row's text therefore does not depend on which other rows share its batch
(so an interrupted run resumes to the same numbers), and rows that share a seed but
differ in strength use common random numbers, which makes the paired Δ_s − Δ_0
comparison far less noisy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from steering.head import reused_logits
from steering.models import LoadedModel
from steering.scratch import Scratch
from steering.vector import Mode, steer_rows

# Sorting a 262,144-entry vocabulary per row per step dominated the original sampler
# (docs/notes.md, 'Sampling'); the nucleus usually lies inside the top few hundred tokens.
TOPK_PREFILTER = 512
# When it does not, the prefilter widens by this factor (512, 2,048, 8,192, ...) before
# falling back to a full sort. On the default grid about 45% of row-steps miss at k=256 and
# 20% at k=1,024. On 10 decode steps of real probabilities (90 rows) the nucleus pick took
# 117 ms per step at 256 x 16 with each short row widened alone, 81 ms with the short rows
# widened together, and 55 ms at 512 x 4 together: a batched top-k runs its rows on every
# core, a one-row top-k on one. All three picked the same 900 tokens.
PREFILTER_GROWTH = 4


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = 50
    temperature: float = 1.0
    top_p: float = 0.95
    greedy: bool = False


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


def _inverse_cdf_pick(sorted_probs: torch.Tensor, top_p: float, u: torch.Tensor) -> torch.Tensor:
    """Index into the sorted probabilities chosen by uniform ``u`` inside the top-p nucleus."""
    cum = sorted_probs.cumsum(dim=-1)
    keep = (cum - sorted_probs) < top_p  # the smallest prefix whose mass reaches top_p
    kept = sorted_probs * keep
    cdf = kept.cumsum(dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp(max=sorted_probs.shape[-1] - 1)


def _nucleus_pick(
    probs: torch.Tensor, u: torch.Tensor, top_p: float, k: int, scratch: Scratch
) -> torch.Tensor:
    """Top-p pick per row from the top ``k`` probabilities, widening ``k`` for rows whose
    nucleus does not fit; a full sort only once ``k`` reaches the vocabulary."""
    if k >= probs.shape[-1]:
        full_probs, full_idx = probs.sort(dim=-1, descending=True)
        return full_idx.gather(1, _inverse_cdf_pick(full_probs, top_p, u)[:, None])[:, 0]
    top_probs, top_idx = probs.topk(k, dim=-1)
    choice = top_idx.gather(1, _inverse_cdf_pick(top_probs, top_p, u)[:, None])[:, 0]
    short = torch.nonzero(top_probs.sum(dim=-1) < top_p)[:, 0]
    if len(short):  # the nucleus is wider than k for these rows
        wide = k * PREFILTER_GROWTH
        # One name per k: the rows of this k are the input of the next.
        rows = scratch.take(f"top{wide}", (len(short), probs.shape[1]), probs)
        torch.index_select(probs, 0, short, out=rows)
        choice[short] = _nucleus_pick(rows, u[short], top_p, wide, scratch)
    return choice


def sample_next(
    logits: torch.Tensor,
    u: torch.Tensor,
    sampling: SamplingConfig,
    prefilter: int | None,
    scratch: Scratch | None = None,
) -> torch.Tensor:
    """Next token per row: greedy, or top-p sampling driven by the row's own uniform.

    With ``scratch``, a loop's steps reuse the tensors of the probabilities (see
    :class:`~steering.scratch.Scratch`); without, each call allocates its own."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    scaled = logits.float()
    if sampling.temperature != 1.0:  # x / 1.0 == x: skip a pass over the vocabulary
        scaled = scaled / sampling.temperature
    scratch = scratch or Scratch()
    probs = torch.softmax(scaled, dim=-1, out=scratch.take("probs", scaled.shape, scaled))
    return _nucleus_pick(probs, u, sampling.top_p, prefilter or probs.shape[-1], scratch)


def _uniforms(rows: Sequence[GenerationRow], steps: int) -> torch.Tensor:
    return torch.stack(
        [torch.rand(steps, generator=torch.Generator().manual_seed(r.seed)) for r in rows]
    )


@torch.inference_mode()
def generate_batch(
    lm: LoadedModel,
    rows: Sequence[GenerationRow],
    directions: torch.Tensor | None,
    layer: int,
    mode: Mode,
    sampling: SamplingConfig,
    on_step: Callable[[int, int], None] | None = None,
    logprobs_for: Sequence[bool] | None = None,
) -> tuple[list[Generation], BatchStats]:
    """Generate every row in one batch, each with its own steering coefficient.

    ``on_step(step, steps)`` is called after each decoding step, for progress displays.
    ``logprobs_for`` says per row whether to record its tokens' log-probabilities
    (default: every row; the others get an empty list). Each recorded row costs a
    log-softmax over the vocabulary per step, and the pipeline needs them only for its
    unsteered rows, whose NLL they are.
    """
    start = time.perf_counter()
    tok = lm.tokenizer
    tok.padding_side = "left"
    enc = tok([r.prompt for r in rows], return_tensors="pt", padding=True).to(lm.device)
    input_ids, mask = enc["input_ids"], enc["attention_mask"]
    n_rows, steps = len(rows), sampling.max_new_tokens
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    u = _uniforms(rows, steps).to(lm.device)
    eos = torch.tensor(eos_ids(lm) or [-1], device=lm.device)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else int(eos[0])
    on_cuda = lm.device.type == "cuda"
    # A full sort costs little on a GPU and needs no host sync.
    prefilter = None if on_cuda else TOPK_PREFILTER
    banned = torch.tensor(suppressed_ids(lm), dtype=torch.long, device=lm.device)
    if logprobs_for is not None and len(logprobs_for) != n_rows:
        raise ValueError(f"logprobs_for has {len(logprobs_for)} entries for {n_rows} rows")
    lp_rows = None if logprobs_for is None else [i for i, w in enumerate(logprobs_for) if w]

    if directions is None:
        directions = torch.zeros(1, lm.hidden_size)
    row_dirs = directions[torch.tensor([r.direction for r in rows])]
    coefs = torch.tensor([r.coefficient for r in rows], dtype=torch.float32)

    tokens = torch.full((n_rows, steps), pad_id, dtype=torch.long, device=lm.device)
    logprobs = torch.zeros(n_rows, steps, device=lm.device)
    done = torch.zeros(n_rows, dtype=torch.bool, device=lm.device)
    lengths = torch.full((n_rows,), steps, dtype=torch.long, device=lm.device)
    cache = None
    step_ids, step_pos = input_ids, positions
    scratch = Scratch()
    # Each step is done with its logits before the next forward pass: one tensor serves all.
    with steer_rows(lm, layer, row_dirs, coefs, mode), reused_logits(lm.model):
        for step in range(steps):
            if on_step is not None:
                on_step(step, steps)
            out = lm.model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=step_pos,
                cache=cache,  # transformers 5.24's name; past_key_values warns, goes in 5.40
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.cache
            logits = out.logits[:, -1, :]
            # The reported log-prob is of the unmasked distribution; the mask then goes in
            # place (out.logits is not used again): no copy of [rows, vocab] per step.
            # A row's log-softmax is the same alone as in its batch, so only the rows
            # that want log-probs pay for one.
            if lp_rows is None:
                logp = torch.log_softmax(logits.float(), dim=-1)
            else:
                logp = [torch.log_softmax(logits[i].float(), dim=-1) for i in lp_rows]
            allowed = logits.float().index_fill_(1, banned, float("-inf"))
            nxt = sample_next(allowed, u[:, step], sampling, prefilter, scratch)
            if lp_rows is None:
                lp = logp.gather(1, nxt[:, None])[:, 0]
            else:
                lp = torch.zeros(n_rows, device=lm.device)
                for i, row_logp in zip(lp_rows, logp, strict=True):
                    lp[i] = row_logp[nxt[i]]
            del logp
            nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
            tokens[:, step] = nxt
            logprobs[:, step] = lp
            hit_eos = torch.isin(nxt, eos) & ~done
            lengths = torch.where(hit_eos, torch.full_like(lengths, step), lengths)
            done = done | hit_eos
            if (not on_cuda or step % 8 == 7) and bool(done.all()):
                break
            step_ids = nxt[:, None]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            step_pos = step_pos[:, -1:] + 1

    tokens_cpu, lengths_cpu, lp_cpu = tokens.cpu(), lengths.cpu(), logprobs.cpu()
    n_prompt = enc["attention_mask"].sum(dim=-1).cpu()
    results = []
    wanted = set(range(n_rows) if lp_rows is None else lp_rows)
    for i, row in enumerate(rows):
        n = int(lengths_cpu[i])
        ids = tokens_cpu[i, :n].tolist()
        results.append(
            Generation(
                key=row.key,
                prompt=row.prompt,
                text=tok.decode(ids, skip_special_tokens=True),
                token_ids=ids,
                n_prompt_tokens=int(n_prompt[i]),
                stopped_at_eos=n < steps,
                logprobs=lp_cpu[i, :n].tolist() if i in wanted else [],
            )
        )
    stats = BatchStats(n_rows, int(lengths_cpu.sum()), time.perf_counter() - start)
    return results, stats


# The output head turns every position it keeps into a 262,144-entry row of logits (1 MiB in
# fp32 on the embedded model). Chunks of 32 rows x 51 positions materialised 1.7 GB of logits,
# and as much again for their log-softmax: a 7.6 GB peak for the perplexity check of the
# default grid. The head now runs only at positions that predict a continuation token, and
# each forward pass keeps at most this many logits.
NLL_LOGITS_BUDGET = 1 << 26  # entries (256 MiB in fp32)


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
    batch_size: int = 32,
    logits_budget: int = NLL_LOGITS_BUDGET,
) -> list[float | None]:
    """Mean negative log-likelihood of each continuation given its prompt, unsteered.

    exp() of it is the perplexity coherence check. Empty continuations give None.
    """
    vocab = lm.model.get_output_embeddings().weight.shape[0]
    conts = [list(c) for c in continuations]
    out: list[float | None] = [None] * len(conts)
    todo = [i for i, c in enumerate(conts) if c]
    chunks = _nll_chunks([len(conts[i]) for i in todo], batch_size, max(1, logits_budget // vocab))
    scratch = Scratch()
    with reused_logits(lm.model):  # each chunk is done with its logits before the next
        for chunk in chunks:
            _chunk_nll(lm, prompts, conts, [todo[j] for j in chunk], out, scratch)
    return out


def _chunk_nll(
    lm: LoadedModel,
    prompts: Sequence[str],
    conts: list[list[int]],
    rows: list[int],
    out: list[float | None],
    scratch: Scratch,
) -> None:
    """One forward pass over ``rows``: their mean NLLs go into ``out``."""
    tok = lm.tokenizer
    enc = [tok(prompts[i])["input_ids"] for i in rows]
    seqs = [p + conts[i] for p, i in zip(enc, rows, strict=True)]
    width = max(len(seq) for seq in seqs)
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    target = torch.zeros_like(ids, dtype=torch.bool)
    for r, (seq, i) in enumerate(zip(seqs, rows, strict=True)):
        ids[r, width - len(seq) :] = torch.tensor(seq)
        attn[r, width - len(seq) :] = 1
        target[r, width - len(conts[i]) :] = True
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    # The output head only at the positions that predict a continuation token.
    predicts = torch.zeros_like(target)
    predicts[:, :-1] = target[:, 1:]
    predicts = predicts.to(lm.device)
    logits = lm.model(
        input_ids=ids.to(lm.device),
        attention_mask=attn.to(lm.device),
        position_ids=pos.to(lm.device),
        logits_to_keep=predicts,
    ).logits
    if logits.dim() == 3:  # a model that ignores a boolean logits_to_keep
        logits = logits[predicts]
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1, out=scratch.take("logp", logits.shape, logits))
    token_lp = logp.gather(1, ids[target].to(lm.device)[:, None])[:, 0].cpu()
    offset = 0
    for i in rows:
        n = len(conts[i])
        out[i] = float(-token_lp[offset : offset + n].mean())
        offset += n
