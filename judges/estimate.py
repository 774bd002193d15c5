"""Dry run of a panel: how many calls each judge would make and the worst-case cost.

Nothing is sent: each judge renders the same prompts and cache keys `run_panel` would use
(`Judge.estimate`), checks its cache without counting hits, and prices the calls that are
left at the worst case (prompt UTF-8 bytes + 64 tokens in, max_tokens out: the budget's own
reservation rule, so `fits(cap)` means the real run cannot hit BudgetExceeded). A model
with no known price keeps cost None ("unknown"), and so does the panel total.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from judges.base import Judge, JudgeEstimate, Rubric
from judges.registry import build_panel
from judges.samples import build_requests, select_samples


@dataclass(frozen=True)
class PanelEstimate:
    """Per-judge estimates plus the judges that could not be built here and why."""

    samples: int
    judges: list[JudgeEstimate]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def calls(self) -> int:
        """API or local calls the run would make (cache hits excluded where known)."""
        return sum(j.calls for j in self.judges)

    @property
    def cost_usd_max(self) -> float | None:
        """Worst-case total; None when any judge that would make calls has no price."""
        costs = [j.cost_usd_max for j in self.judges if j.calls]
        if any(c is None for c in costs):
            return None
        return float(sum(c for c in costs if c is not None))

    def fits(self, budget_usd: float | None) -> bool | None:
        """True when the worst case fits the cap (no cap: True); None when unknown."""
        if budget_usd is None:
            return True
        total = self.cost_usd_max
        return None if total is None else total <= budget_usd

    def to_frame(self) -> pd.DataFrame:
        """One row per judge, for display; unknown costs stay None (NaN), never 0."""
        return pd.DataFrame([j.to_dict() for j in self.judges])

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "calls": self.calls,
            "cost_usd_max": self.cost_usd_max,
            "judges": [j.to_dict() for j in self.judges],
            "skipped": dict(self.skipped),
        }


def estimate_panel(
    judges: Sequence[str | Judge],
    samples: pd.DataFrame,
    rubric: Rubric | None = None,
    *,
    limit: int | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    **common: Any,
) -> PanelEstimate:
    """Estimate `run_panel(judges, samples, rubric, limit=limit)` without running it.

    `judges` are names (built as `build_panel(names, options, **common)` would, without a
    budget cap, and closed again; those that cannot be built here are in `.skipped`) or
    already built Judge objects (left open).
    """
    selected = select_samples(samples, limit)
    requests = build_requests(selected, rubric or Rubric())
    names = [j for j in judges if isinstance(j, str)]
    built, skipped = build_panel(names, options=options, **common) if names else ([], {})
    fresh = iter(built)  # build_panel keeps the order of the names it could build
    estimates: list[JudgeEstimate] = []
    try:
        for item in judges:
            if isinstance(item, Judge):
                estimates.append(item.estimate(requests))
            elif item not in skipped:
                estimates.append(next(fresh).estimate(requests))
    finally:
        for judge in built:
            judge.close()
    return PanelEstimate(samples=len(requests), judges=estimates, skipped=skipped)
