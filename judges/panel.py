"""Run a panel of judges over samples and measure whether the panel agrees.

Criterion 4 of the design ("human validation passes OR multi-model panel agrees") is made
concrete here: the panel agrees when Krippendorff's alpha (interval) >= 0.667 *and* the
panel-mean score correlates with the automated Delta at Pearson r > 0.7. Every statistic
that cannot be computed (n < 3, constant input, a single judge) is a NotEvaluable with a
reason, never NaN: the original research logged NaN correlations as results.

Statistics come from `metrics.stats` (the suite's shared NaN-free implementations).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from judges.base import Judge, NoJudgesError, Rating, RatingRequest, Rubric
from judges.runner import rate_all
from judges.samples import build_requests, select_samples
from metrics.stats import (
    Alpha,
    Correlation,
    NotEvaluable,
    clustered_pearson,
    krippendorff_alpha_interval,
    pairwise_spearman,
    pearson,
)

ALPHA_THRESHOLD = 0.667  # Krippendorff's conventional floor for tentative conclusions
R_DELTA_THRESHOLD = 0.7  # the design's Hypothesis 4 threshold, applied to the panel mean

# cost is in USD (None when the model has no price), latency in seconds.
SCORE_COLUMNS = [
    "sample_id",
    "judge",
    "score",
    "raw",
    "tokens",
    "cost",
    "latency",
    "cache_hit",
    "fluency",
    "input_tokens",
    "output_tokens",
    "model",
    "attempts",
    "error",
    "concept_score",  # the axbench rubric's axes (score is then their harmonic mean)
    "instruction",
]

Stat = Correlation | Alpha | NotEvaluable


@dataclass
class PanelResult:
    """Everything a panel run produced; `to_metrics()` flattens it for MLflow."""

    scores: pd.DataFrame  # long: one row per (sample, judge)
    per_sample: pd.DataFrame  # one row per sample: panel mean/median and each judge's score
    judges: list[str]
    alpha: Alpha | NotEvaluable
    pairwise_spearman: dict[tuple[str, str], Correlation | NotEvaluable]
    judge_vs_delta: dict[str, Correlation | NotEvaluable]
    judge_vs_human: dict[str, Correlation | NotEvaluable]
    panel_mean_vs_delta: Correlation | NotEvaluable
    panel_mean_vs_human: Correlation | NotEvaluable
    totals: dict[str, float]
    wall_time_s: float
    judge_params: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_metrics(self) -> dict[str, float]:
        """Flat {name: float} of every evaluable statistic and total (no NaN, ever)."""
        out: dict[str, float] = {}
        for name, stat in self._named():
            if isinstance(stat, Correlation):
                out[name] = stat.r
                out[f"{name}_n"] = float(stat.n)
            elif isinstance(stat, Alpha):
                out[name] = stat.value
                out[f"{name}_n_units"] = float(stat.n_units)
        out.update({f"total_{k}": float(v) for k, v in self.totals.items()})
        out["wall_time_s"] = self.wall_time_s
        agrees = panel_agrees(self)
        if agrees is not None:
            out["panel_agrees"] = float(agrees)
        return {k: v for k, v in out.items() if np.isfinite(v)}

    def _named(self) -> list[tuple[str, Stat]]:
        """Every statistic with its metric name."""
        return [
            ("panel_alpha", self.alpha),
            ("panel_mean_r_delta", self.panel_mean_vs_delta),
            ("panel_mean_r_human", self.panel_mean_vs_human),
            *((f"r_delta/{j}", s) for j, s in self.judge_vs_delta.items()),
            *((f"r_human/{j}", s) for j, s in self.judge_vs_human.items()),
            *((f"spearman/{a}~{b}", s) for (a, b), s in self.pairwise_spearman.items()),
        ]

    def not_evaluable(self) -> dict[str, str]:
        """{statistic: reason} for everything that could not be computed."""
        return {n: s.reason for n, s in self._named() if isinstance(s, NotEvaluable)}


def panel_agrees(result: PanelResult) -> bool | None:
    """alpha >= 0.667 and r(panel mean, Delta) > 0.7; None when either is not evaluable."""
    if not isinstance(result.alpha, Alpha) or not isinstance(
        result.panel_mean_vs_delta, Correlation
    ):
        return None
    return bool(
        result.alpha.value >= ALPHA_THRESHOLD and result.panel_mean_vs_delta.r > R_DELTA_THRESHOLD
    )


def _pearson(
    x: pd.Series, y: pd.Series | None, concept: pd.Series | None = None
) -> Correlation | NotEvaluable:
    """Pearson r over the rows both have; with a concept column its interval resamples
    concepts (rows of one concept are not independent), else Fisher z over rows."""
    if y is None:
        return NotEvaluable("no human_rating column", "pearson")
    both = pd.concat([x.astype(float), y.astype(float)], axis=1).dropna()
    xs, ys = both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy()
    if concept is None:
        return pearson(xs, ys)
    return clustered_pearson(xs, ys, list(concept.loc[both.index]))


def run_panel(
    judges: Sequence[Judge],
    samples: pd.DataFrame,
    rubric: Rubric | None = None,
    progress: Callable[[int, int], None] | None = None,
    *,
    max_concurrency: int = 4,
    limit: int | None = None,
) -> PanelResult:
    """Have every judge rate every sample, then compute agreement and validity statistics.

    samples: columns sample_id, concept, text, delta and optionally human_rating (NaN where
    a sample has no human rating). `limit` rates only the first N rows (table order).
    API judges run concurrently in one pool of `max_concurrency` threads (at most that
    many calls in flight, each judge also within its own max_concurrency); the local
    llama judge runs in this thread meanwhile; `max_concurrency=1` runs the judges one
    after another. Results do not depend on it. BudgetExceeded propagates (finished
    ratings are cached). ``progress(done, total)`` hears of every finished rating (the
    command line draws it).
    """
    if not judges:
        raise NoJudgesError(
            "No judges to run: every requested judge was skipped or none was given "
            "(see build_panel's skipped reasons)."
        )
    names = [j.name for j in judges]
    if len(set(names)) != len(names):
        raise ValueError(f"judge names must be unique, got {names}")
    if max_concurrency < 1:
        raise ValueError("max_concurrency must be >= 1")
    samples = select_samples(samples, limit)
    requests = build_requests(samples, rubric or Rubric())
    started = time.perf_counter()
    by_judge = _rate_with_progress(judges, requests, progress, max_concurrency)
    wall = time.perf_counter() - started
    # SCORE_COLUMNS picks the table's columns: a rating's fields, cost and latency renamed.
    rows = [
        {
            **rating.to_dict(),
            "sample_id": sample_id,
            "judge": judge.name,
            "tokens": rating.input_tokens + rating.output_tokens,
            "cost": rating.cost_usd,
            "latency": rating.latency_s,
        }
        for judge in judges
        for sample_id, rating in zip(samples["sample_id"], by_judge[judge.name], strict=True)
    ]
    scores = pd.DataFrame(rows, columns=SCORE_COLUMNS)
    scores["score"] = scores["score"].astype(float)  # None -> NaN in the table only
    return _summarise(judges, samples, scores, wall)


def _rate_with_progress(
    judges: Sequence[Judge],
    requests: Sequence[RatingRequest],
    progress: Callable[[int, int], None] | None,
    max_concurrency: int,
) -> dict[str, list[Rating]]:
    if not progress:
        return rate_all(judges, requests, max_concurrency)
    lock = threading.Lock()
    total = len(judges) * len(requests)
    done = 0
    progress(0, total)

    def tick(_judge: str, _index: int, _rating: Rating) -> None:
        nonlocal done
        with lock:  # ratings finish on several threads
            done += 1
            progress(done, total)

    return rate_all(judges, requests, max_concurrency, on_result=tick)


def _summarise(
    judges: Sequence[Judge], samples: pd.DataFrame, scores: pd.DataFrame, wall: float
) -> PanelResult:
    names = [j.name for j in judges]
    wide = scores.pivot(index="sample_id", columns="judge", values="score")
    wide = wide.reindex(index=samples["sample_id"], columns=names)
    by_id = samples.set_index("sample_id")
    per_sample = by_id[[c for c in ("concept", "delta", "human_rating") if c in by_id]].copy()
    per_sample["panel_mean"] = wide.mean(axis=1, skipna=True)
    per_sample["panel_median"] = wide.median(axis=1, skipna=True)
    per_sample["n_scores"] = wide.notna().sum(axis=1)
    for name in names:
        per_sample[f"score:{name}"] = wide[name]
    per_sample = per_sample.reset_index()

    alpha = krippendorff_alpha_interval(wide.T.to_numpy(dtype=float))
    pairs = pairwise_spearman(wide) if len(names) >= 2 else {}
    delta, human, concept = by_id["delta"], by_id.get("human_rating"), by_id.get("concept")

    mean = per_sample.set_index("sample_id")["panel_mean"]
    costs = scores["cost"]
    totals = {
        "input_tokens": float(scores["input_tokens"].sum()),
        "output_tokens": float(scores["output_tokens"].sum()),
        "tokens": float(scores["tokens"].sum()),
        # Unknown-price calls (cost None) are excluded from the sum and counted separately.
        "cost_usd": float(pd.to_numeric(costs, errors="coerce").fillna(0.0).sum()),
        "calls_without_price": float(costs.isna().sum()),
        "cache_hits": float(scores["cache_hit"].sum()),
        "ratings": float(len(scores)),
        "abstentions": float(scores["score"].isna().sum()),
        "errors": float(scores["error"].notna().sum()),
    }
    return PanelResult(
        scores=scores,
        per_sample=per_sample,
        judges=names,
        alpha=alpha,
        pairwise_spearman=pairs,
        judge_vs_delta={n: _pearson(wide[n], delta) for n in names},
        judge_vs_human={n: _pearson(wide[n], human) for n in names},
        panel_mean_vs_delta=_pearson(mean, delta, concept),
        panel_mean_vs_human=_pearson(mean, human, concept),
        totals=totals,
        wall_time_s=wall,
        judge_params={j.name: j.describe() for j in judges},
    )
