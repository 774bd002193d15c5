"""The next-token choice: greedy, or top-p by inverse CDF over the sorted nucleus.

Every row draws from its own uniform ``u``: the token whose place in the nucleus's
cumulative distribution (tokens sorted by probability, descending) first exceeds
``u`` times the nucleus's mass. Two ways to find that token:

- :func:`sorted_pick`, the reference: one stable sort of the whole vocabulary (ties in
  probability ordered by token id), no host synchronisation, so it also runs inside a
  captured CUDA graph;
- :func:`sample_next` with a prefilter, the CPU's: the top ``k`` tokens, widened for the
  rows whose nucleus does not fit. It picks the same token as the sort up to exact ties
  (``topk`` may order tied tokens differently), at a fraction of the cost on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from steering.scratch import Scratch

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


def inverse_cdf_pick(sorted_probs: torch.Tensor, top_p: float, u: torch.Tensor) -> torch.Tensor:
    """Index into the sorted probabilities chosen by uniform ``u`` inside the top-p nucleus."""
    cum = sorted_probs.cumsum(dim=-1)
    keep = (cum - sorted_probs) < top_p  # the smallest prefix whose mass reaches top_p
    kept = sorted_probs * keep
    cdf = kept.cumsum(dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp(max=sorted_probs.shape[-1] - 1)


# Chunks of the vocabulary whose maxima pick the candidates of the exact top-k
# (:func:`candidate_topk`); a vocabulary that does not divide keeps torch.topk.
TOPK_CHUNK = 32


def candidate_topk(probs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values per row, sorted descending, and their indices: the values
    exactly those of ``probs.topk(k)``, the indices theirs except where values tie (then
    any of the tied tokens may stand at a place).

    Why not ``torch.topk`` alone: on the CPU it partially sorts every row of 262,144
    probabilities, 52 ms per 90-row decode step for k = 513 on a 2-core Xeon, a tenth of
    the step. The largest ``k`` values lie in the ``k`` chunks of ``TOPK_CHUNK`` tokens
    with the largest maxima (a chunk holding one of them has a maximum at least as
    large; chunks tied at the boundary hold only tied values), so one pass of chunk
    maxima and two small top-k's find the same values."""
    rows, vocab = probs.shape
    n_chunks = vocab // TOPK_CHUNK
    if vocab % TOPK_CHUNK or k * 4 > n_chunks:
        return probs.topk(k, dim=-1)
    maxima = probs.view(rows, n_chunks, TOPK_CHUNK).amax(dim=-1)
    chunks = maxima.topk(k, dim=-1).indices  # [rows, k]
    within = torch.arange(TOPK_CHUNK, device=probs.device)
    candidates = (chunks[:, :, None] * TOPK_CHUNK + within).reshape(rows, -1)
    values, at = probs.gather(1, candidates).topk(k, dim=-1)
    return values, candidates.gather(1, at)


def _tied(values: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """Rows whose value at place ``at`` equals a neighbour's among ``values`` (sorted
    descending, one more place than a pick can reach)."""
    picked = values.gather(1, at[:, None])[:, 0]
    left = values.gather(1, (at - 1).clamp(min=0)[:, None])[:, 0]
    right = values.gather(1, (at + 1)[:, None])[:, 0]
    return ((at > 0) & (left == picked)) | (right == picked)


def nucleus_pick(
    probs: torch.Tensor, u: torch.Tensor, top_p: float, k: int, scratch: Scratch
) -> torch.Tensor:
    """Top-p pick per row from the top ``k`` probabilities, widening ``k`` for rows whose
    nucleus does not fit; a full sort only once ``k`` reaches the vocabulary.

    The top ``k + 1`` come from :func:`candidate_topk`, whose values (hence every sum,
    cumulative sum and pick place) are ``topk``'s; only which of several tokens of equal
    probability stands at a place may differ, so a row whose picked probability ties a
    neighbour takes its token from ``probs[row].topk(k)``, as it always did."""
    if k >= probs.shape[-1]:
        full_probs, full_idx = probs.sort(dim=-1, descending=True)
        return full_idx.gather(1, inverse_cdf_pick(full_probs, top_p, u)[:, None])[:, 0]
    wide_probs, wide_idx = candidate_topk(probs, k + 1)
    top_probs = wide_probs[:, :k].contiguous()  # the same tensor topk(k) returns, bit for bit
    at = inverse_cdf_pick(top_probs, top_p, u)
    choice = wide_idx.gather(1, at[:, None])[:, 0]
    for row in torch.nonzero(_tied(wide_probs, at))[:, 0].tolist():
        choice[row] = probs[row : row + 1].topk(k, dim=-1).indices[0, at[row]]
    short = torch.nonzero(top_probs.sum(dim=-1) < top_p)[:, 0]
    if len(short):  # the nucleus is wider than k for these rows
        wide = k * PREFILTER_GROWTH
        # One name per k: the rows of this k are the input of the next.
        rows = scratch.take(f"top{wide}", (len(short), probs.shape[1]), probs)
        torch.index_select(probs, 0, short, out=rows)
        choice[short] = nucleus_pick(rows, u[short], top_p, wide, scratch)
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
    :class:`~steering.scratch.Scratch`); without, each call allocates its own. The CPU
    policy's sampler (``prefilter`` None sorts, unstably, the whole vocabulary)."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    scaled = logits.float()
    if sampling.temperature != 1.0:  # x / 1.0 == x: skip a pass over the vocabulary
        scaled = scaled / sampling.temperature
    scratch = scratch or Scratch()
    probs = torch.softmax(scaled, dim=-1, out=scratch.take("probs", scaled.shape, scaled))
    return nucleus_pick(probs, u, sampling.top_p, prefilter or probs.shape[-1], scratch)


def sorted_pick(logits: torch.Tensor, u: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
    """The reference next token: greedy argmax, or the top-p inverse-CDF pick over one
    stable sort of the whole vocabulary (ties by token id). Shapes never depend on the
    data and nothing waits on the host, so a CUDA graph can capture it."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    scaled = logits.float()
    if sampling.temperature != 1.0:
        scaled = scaled / sampling.temperature
    probs = torch.softmax(scaled, dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    return order.gather(1, inverse_cdf_pick(sorted_probs, sampling.top_p, u)[:, None])[:, 0]
