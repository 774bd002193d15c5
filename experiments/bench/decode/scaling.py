"""Section ``scaling``: generation time against the number of concepts and new tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from experiments.bench.core.measure import Measurement, rounded
from experiments.bench.core.options import BenchOptions
from experiments.bench.core.workload import Workload, scaled_workload
from experiments.bench.decode.batched import run_batched
from steering.models import LoadedModel


def section_scaling(
    lm: LoadedModel,
    wl: Workload,
    opts: BenchOptions,
    base: Measurement | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Generation time only, against concepts and max_new_tokens (1 repeat past the default)."""
    default_work = len(wl.rows) * wl.sampling.max_new_tokens

    def measure(w: Workload, what: str, **extra: Any) -> dict[str, Any]:
        """``w``'s generation timed (the side-by-side run reused when ``w`` is the grid)."""
        say(f"scaling: {what}")
        reused = (
            base is not None
            and len(w.rows) == len(wl.rows)
            and w.sampling.max_new_tokens == wl.sampling.max_new_tokens
        )
        m = base if reused else None
        if not reused:
            reps = opts.repeats if len(w.rows) * w.sampling.max_new_tokens <= default_work else 1
            for _ in range(reps):
                m = run_batched(lm, w, m=m)
        assert m is not None
        secs = m.median_seconds or 0.0
        return {
            "rows": len(w.rows),
            "max_new_tokens": w.sampling.max_new_tokens,
            "median_seconds": rounded(secs, 3),
            "tokens": m.tokens[-1] if m.tokens else 0,
            "tokens_per_second": rounded(m.tokens_per_second, 2),
            "seconds_per_row": rounded(secs / max(1, len(w.rows)), 4),
            "repeats": len(m.seconds),
            **extra,
            "reused_batched": reused,
        }

    concepts = {}
    for n in opts.scaling_concepts:
        w, how = scaled_workload(wl, n)
        concepts[str(n)] = measure(w, f"{n} concepts ({len(w.rows)} rows)", how=how)
    tokens = {str(t): measure(wl.with_tokens(t), f"{t} new tokens") for t in opts.scaling_tokens}
    return {
        "stage": "generation only (generate_batch over the grid, batched as make run does)",
        "repeats_rule": "--repeats up to the default grid's rows x tokens, 1 beyond it",
        "concepts": concepts,
        "max_new_tokens": tokens,
    }
