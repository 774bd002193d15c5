"""Section ``head``: the output head as one product or in blocks of vocabulary rows.

Two measurements, both side by side in this process: the head product alone at the
grid's batch size for each block size (interleaved, with its logits compared bit for
bit against the single product), and our generation over the whole grid with the
single product against the default block (tokens/s, and whether every sampled text is
the same). ``steering.head`` says why the blocks exist.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from experiments.bench.core.measure import Measurement, interleaved, rounded, speedup
from experiments.bench.core.options import BenchOptions
from experiments.bench.core.workload import Workload, batches_of
from experiments.bench.decode.batched import run_batched
from steering.head import HEAD_BLOCK, BlockedHead, use_blocked_head
from steering.models import LoadedModel


@contextmanager
def head_block(lm: LoadedModel, block: int) -> Iterator[None]:
    """The model's head with ``block`` rows per product, restored afterwards."""
    head = lm.model.get_output_embeddings()
    before = head.block if isinstance(head, BlockedHead) else 0
    use_blocked_head(lm.model, block)
    try:
        yield
    finally:
        use_blocked_head(lm.model, before)


@torch.inference_mode()
def time_products(
    lm: LoadedModel, rows: int, repeats: int, blocks: tuple[int, ...]
) -> dict[str, Any]:
    """Median milliseconds and GFLOP/s of the head alone per block size; bit-equality."""
    head = lm.model.get_output_embeddings()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 1, head.in_features, generator=gen, dtype=head.weight.dtype)
    x = x.to(head.weight.device)
    with head_block(lm, 0):
        reference = head(x)
    seconds: dict[int, list[float]] = {b: [] for b in blocks}
    same: dict[int, bool] = {}
    for _ in range(repeats + 1):  # the first round warms each variant up
        for block in blocks:
            with head_block(lm, block):
                start = time.perf_counter()
                out = head(x)
                seconds[block].append(time.perf_counter() - start)
                same[block] = bool(torch.equal(out, reference))
    flop = 2 * rows * head.in_features * head.out_features
    out = {}
    for block, values in seconds.items():
        med = statistics.median(values[1:])
        out[str(block)] = {
            "median_ms": rounded(med * 1000, 2),
            "gflops": rounded(flop / med / 1e9, 1),
            "bit_identical_to_single_product": same[block],
        }
    return out


def section_head(
    lm: LoadedModel, wl: Workload, opts: BenchOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """The head product per block size, then the whole grid: single product vs default."""
    if not isinstance(lm.model.get_output_embeddings(), BlockedHead):
        return {"skipped": "the model has no blocked head (it is not a linear head on a CPU)"}
    rows = len(batches_of(lm, wl.rows, wl.batch_size)[0])
    blocks = opts.head_blocks
    say(f"head: the product alone at {rows} rows, blocks {', '.join(map(str, blocks))}")
    products = time_products(lm, rows, max(3, opts.repeats), blocks)
    block = opts.head_block or HEAD_BLOCK

    def with_block(b: int) -> Callable[[Measurement | None], Measurement]:
        def run(m: Measurement | None) -> Measurement:
            with head_block(lm, b):
                return run_batched(lm, wl, m=m)

        return run

    say(f"head: the grid with one product and with blocks of {block}")
    runs = {"single": with_block(0), "blocked": with_block(block)}
    measured = interleaved(runs, opts.repeats)
    single, blocked = measured["single"], measured["blocked"]
    same = [
        a.token_ids == b.token_ids
        for a, b in zip(single.generations or [], blocked.generations or [], strict=True)
    ]
    return {
        "default_block": HEAD_BLOCK,
        "blocked_run_block": block,
        "product_rows": rows,
        "products": products,
        "generation": {"single": single.to_dict(), "blocked": blocked.to_dict()},
        "ratio_blocked_vs_single": speedup(blocked, single),
        "texts_identical": f"{sum(same)}/{len(same)}",
        "how": "block 0 is one x @ W.T over the whole vocabulary (F.linear); the others are "
        "products of that many vocabulary rows written into one logits tensor. Products: "
        "median of interleaved repeats after a warm-up round, on seeded random hidden "
        "states. Generation: the whole grid, interleaved repeat by repeat",
    }
