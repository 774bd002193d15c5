"""Section ``tuning``: torch threads and batch size, on a short version of the grid."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from experiments.bench.core.measure import Measurement, Run, interleaved, torch_threads
from experiments.bench.core.options import BenchOptions
from experiments.bench.core.workload import Workload
from experiments.bench.decode.batched import run_batched
from steering.models import LoadedModel


def section_tuning(
    lm: LoadedModel, wl: Workload, opts: BenchOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Each thread count and batch size over the whole grid at ``tuning_tokens``, interleaved."""
    short = wl.with_tokens(min(opts.tuning_tokens, wl.sampling.max_new_tokens))
    cores = os.cpu_count() or 1
    current = torch.get_num_threads()
    thread_options = sorted(set(opts.tuning_threads) or {1, current, cores})
    runs: dict[str, Run] = {}
    for t in thread_options:

        def by_threads(m: Measurement | None, t: int = t) -> Measurement:
            with torch_threads(t):
                return run_batched(lm, short, m=m)

        runs[f"threads={t}"] = by_threads
    # the threads={current} run already is the configured batch size
    sizes = sorted({b for b in opts.tuning_batch_sizes if b < len(wl.rows)} - {wl.batch_size})
    for b in sizes:

        def at_size(m: Measurement | None, b: int = b) -> Measurement:
            return run_batched(lm, short, batch_size=b, m=m)

        runs[f"batch_size={b}"] = at_size
    say(f"tuning: {', '.join(runs)} at {short.sampling.max_new_tokens} tokens")
    measured = interleaved(runs, opts.repeats)
    out = {k: v.to_dict() for k, v in measured.items()}
    best = max(measured, key=lambda k: measured[k].tokens_per_second or 0.0)
    return {
        "max_new_tokens": short.sampling.max_new_tokens,
        "rows": len(wl.rows),
        "configured": {"threads": current, "batch_size": wl.batch_size},
        "runs": out,
        "best": best,
    }
