"""Dry run of a panel: how many calls each judge would make and the worst-case cost.

Nothing is sent: each judge renders the same prompts and cache keys `run_panel` would use
(`Judge.estimate`), checks its cache without counting hits, and prices the calls that are
left at the worst case (prompt UTF-8 bytes + 64 tokens in, max_tokens out: the budget's own
reservation rule, so `fits(cap)` means the real run cannot hit BudgetExceeded). A model
with no known price keeps cost None ("unknown"), and so does the panel total.

An API judge whose key is not set is still priced, so a study can be costed before its
keys exist: it is built with `estimate_only=True` (no key read, no client, and it refuses
to rate), and its estimate carries `missing_key`, the variable to set. A real run skips it
until then (`build_panel`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from judges.base import Judge, JudgeEstimate, JudgeUnavailable, MissingKey, Rubric
from judges.registry import get_judge, judge_options
from judges.samples import build_requests, select_samples

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PanelEstimate:
    """Per-judge estimates plus the judges that could not be built here and why.

    A judge priced without its key is among `judges` (with `missing_key` set), not in
    `skipped`: its calls and cost count in the totals, as what it would cost once set.
    """

    samples: int
    judges: list[JudgeEstimate]
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def missing_keys(self) -> dict[str, str]:
        """{judge: environment variable} for the judges priced without their key."""
        return {j.judge: j.missing_key for j in self.judges if j.missing_key is not None}

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
            "missing_keys": self.missing_keys,
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

    `judges` are names (built with the options `build_panel(names, options, **common)`
    would give them, without a budget cap, and closed again) or already built Judge
    objects (left open). A name whose key is not set is built `estimate_only` and priced
    all the same (its estimate's `missing_key` names the variable); one that cannot be
    built here for another reason (package or model file missing) is in `.skipped`.
    """
    selected = select_samples(samples, limit)
    requests = build_requests(selected, rubric or Rubric())
    estimates: list[JudgeEstimate] = []
    skipped: dict[str, str] = {}
    for item in judges:
        if isinstance(item, Judge):
            estimates.append(item.estimate(requests))
            continue
        kwargs = judge_options(item, options, **common)
        missing: str | None = None
        try:
            judge = get_judge(item, **kwargs)
        except MissingKey as exc:
            # Priced from the table without the key: no key read, no client, cannot rate.
            judge = get_judge(item, **kwargs, estimate_only=True)
            missing = exc.key_env
        except JudgeUnavailable as exc:
            skipped[item] = str(exc)
            log.warning("Skipping judge %s: %s", item, exc)
            continue
        try:
            estimate = judge.estimate(requests)
        finally:
            judge.close()
        estimates.append(replace(estimate, missing_key=missing) if missing else estimate)
    return PanelEstimate(samples=len(requests), judges=estimates, skipped=skipped)
