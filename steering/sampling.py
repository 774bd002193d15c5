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
# Rows widened past what chunks of 32 narrow (k = 8,192 of 262,144) use chunks of 8: on
# 13 saved steps their full-row topk had taken 12 ms of a 64 ms step.
WIDE_CHUNK = 8
# Candidates are narrowed again in chunks a quarter the size, down to this size: on 90
# rows of 262,144 a further level of chunks of 2 cost more (95 ms a step) than it saved.
MIN_CHUNK = 4


def chunk_maxima(
    probs: torch.Tensor, chunk: int = TOPK_CHUNK, rows: torch.Tensor | None = None
) -> torch.Tensor | None:
    """The maximum per chunk of ``chunk`` tokens of each row of ``probs[rows]`` (default:
    every row, read in place; picked rows are copied once for the reduction),
    ``[rows, vocab // chunk]``, or None when the vocabulary does not divide into chunks
    (or the rows are not contiguous)."""
    n_rows, vocab = probs.shape
    if vocab % chunk or not probs.is_contiguous():
        return None
    chunked = probs.view(n_rows, vocab // chunk, chunk)
    return (chunked if rows is None else chunked.index_select(0, rows)).amax(dim=-1)


def _chunks_narrow(probs: torch.Tensor, k: int, chunk: int = TOPK_CHUNK) -> bool:
    """Whether :func:`candidate_topk` narrows ``probs``'s top ``k`` through chunks."""
    n = probs.shape[1]
    return chunk >= MIN_CHUNK and not n % chunk and 2 * k <= n // chunk and probs.is_contiguous()


def narrowing_chunk(probs: torch.Tensor, k: int) -> int | None:
    """The chunk size :func:`nucleus_pick` narrows ``probs``'s top ``k`` through:
    ``TOPK_CHUNK``, else ``WIDE_CHUNK``, else None (no chunks narrow it)."""
    return next((c for c in (TOPK_CHUNK, WIDE_CHUNK) if _chunks_narrow(probs, k, c)), None)


def candidate_topk(
    probs: torch.Tensor,
    k: int,
    rows: torch.Tensor | None = None,
    maxima: torch.Tensor | None = None,
    chunk: int = TOPK_CHUNK,
    ordered: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest values of each row of ``probs[rows]`` (default: every row), sorted
    descending (in no particular order if not ``ordered``), and their indices: the values
    exactly those of ``topk(k)``, the indices theirs except where values tie (then any of
    the tied tokens may stand at a place). ``maxima``, the rows' :func:`chunk_maxima` for
    ``chunk``, saves the pass over the vocabulary when a caller already has them.

    Why not ``torch.topk`` alone: on the CPU it partially sorts every row of 262,144
    probabilities, 52 ms per 90-row decode step for k = 513 on a 2-core Xeon, and 24 ms
    more for the third of the rows whose nucleus needs k = 2,049. The largest ``k``
    values lie in the ``k`` chunks with the largest maxima (a chunk holding one of them
    has a maximum at least as large; chunks tied at the boundary hold only tied values),
    so the top ``k`` chunks' tokens are candidates enough, and they are narrowed the same
    way in chunks a quarter the size before a last, small ``topk``. Which chunks are the
    top ``k`` is all the search needs of them, so they are found unordered (``topk``'s
    sort of its ``k`` is skipped where it would select, not heap, them). The chunks are
    copied out as whole rows of ``chunk`` tokens (one ``index_select``), and ``rows``
    picks rows without copying them. Where chunks would not narrow the search (fewer than
    ``2k`` chunks) it is ``topk`` on the rows."""
    if not _chunks_narrow(probs, k, chunk):
        picked = probs if rows is None else probs.index_select(0, rows)
        return picked.topk(k, dim=-1, sorted=ordered)
    n_chunks = probs.shape[1] // chunk
    if maxima is None:
        maxima = chunk_maxima(probs, chunk, rows)
        assert maxima is not None  # _chunks_narrow: the vocabulary divides, rows contiguous
    first = torch.arange(probs.shape[0], device=probs.device) if rows is None else rows
    _, chunks = candidate_topk(maxima, k, chunk=chunk, ordered=False)  # [rows, k]
    flat = (chunks + first[:, None] * n_chunks).view(-1)
    candidates = probs.view(-1, chunk).index_select(0, flat).view(len(first), k * chunk)
    values, at = candidate_topk(candidates, k, chunk=chunk // 4, ordered=ordered)
    return values, chunks.gather(1, at // chunk) * chunk + at % chunk


def _tied(values: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
    """Rows whose value at place ``at`` equals a neighbour's among ``values`` (sorted
    descending, one more place than a pick can reach)."""
    picked = values.gather(1, at[:, None])[:, 0]
    left = values.gather(1, (at - 1).clamp(min=0)[:, None])[:, 0]
    right = values.gather(1, (at + 1)[:, None])[:, 0]
    return ((at > 0) & (left == picked)) | (right == picked)


def nucleus_pick(
    probs: torch.Tensor,
    u: torch.Tensor,
    top_p: float,
    k: int,
    scratch: Scratch,
    rows: torch.Tensor | None = None,
    maxima: torch.Tensor | None = None,
) -> torch.Tensor:
    """Top-p pick for each row of ``probs[rows]`` (default: every row) from its top ``k``
    probabilities, widening ``k`` for rows whose nucleus does not fit; a full sort only
    once ``k`` reaches the vocabulary. ``u`` (and ``maxima``, the rows' chunk maxima,
    reused at every width their chunk narrows) are those rows'. Where chunks no longer
    narrow the search the rows are copied out once, into ``scratch``'s tensor for this ``k``.

    The top ``k + 1`` come from :func:`candidate_topk`, whose values (hence every sum,
    cumulative sum and pick place) are ``topk``'s; only which of several tokens of equal
    probability stands at a place may differ, so a row whose picked probability ties a
    neighbour takes its token from ``probs[row].topk(k)``, as it always did."""
    chunk = narrowing_chunk(probs, k + 1)
    if maxima is not None and (chunk is None or maxima.shape[1] * chunk != probs.shape[1]):
        maxima = None  # another chunk's maxima
    if rows is not None and chunk is None:
        # One name per k: the rows of this k are the input of the next.
        copied = scratch.take(f"top{k}", (len(rows), probs.shape[1]), probs)
        probs, rows = torch.index_select(probs, 0, rows, out=copied), None
    if k >= probs.shape[-1]:
        full_probs, full_idx = probs.sort(dim=-1, descending=True)
        return full_idx.gather(1, inverse_cdf_pick(full_probs, top_p, u)[:, None])[:, 0]
    if chunk is not None and maxima is None:
        maxima = chunk_maxima(probs, chunk, rows)
    wide_probs, wide_idx = candidate_topk(probs, k + 1, rows, maxima, chunk or TOPK_CHUNK)
    top_probs = wide_probs[:, :k].contiguous()  # the same tensor topk(k) returns, bit for bit
    at = inverse_cdf_pick(top_probs, top_p, u)
    choice = wide_idx.gather(1, at[:, None])[:, 0]
    for i in torch.nonzero(_tied(wide_probs, at))[:, 0].tolist():
        row = i if rows is None else int(rows[i])
        choice[i] = probs[row : row + 1].topk(k, dim=-1).indices[0, at[i]]
    short = torch.nonzero(top_probs.sum(dim=-1) < top_p)[:, 0]
    if len(short):  # the nucleus is wider than k for these rows
        choice[short] = nucleus_pick(
            probs,
            u[short],
            top_p,
            k * PREFILTER_GROWTH,
            scratch,
            short if rows is None else rows[short],
            None if maxima is None else maxima[short],
        )
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
