"""``steer-eval run --dry-run``: the plan of a run without loading the model.

Rows come from the plan itself (``plan.planned_rows``: every split, arm and strength the
config asks for), tokens are rows × ``generation.max_new_tokens`` (an upper bound: a row
stops at its end-of-text token), and the time is those tokens at the generation speed
of the newest finished run in the store that ran on this machine with the same model
(else on this machine, else anywhere), which the estimate names. The run's other
stages (model load, perplexity, scoring, measurement, the MLflow writes: its ``time/*``
metrics, which are its record's timings) are added as long as they took in that run,
so the estimate sums every stage; classifier training is not in it (it happens once per
probe set).
"""

from __future__ import annotations

import platform
from collections import Counter
from dataclasses import dataclass, field

from experiments import tracking
from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig
from experiments.pipeline.plan import CONCEPT_ARM, planned_rows
from experiments.tracking.context import HOST_TAG

SPEED_METRIC = "generation/tokens_per_second"
# `embedded` in a config is this model id in a run's `model` parameter.
EMBEDDED_ID = "embedded:gemma-3-270m"


@dataclass
class Speed:
    """Where a speed comes from: a finished run and how it matches this one."""

    run_id: str
    run_name: str
    tokens_per_second: float
    match: str  # "this machine, same model" | "this machine" | "another machine"
    # that run's other stages (time/<stage> but generation and classifier training)
    other_stages: dict[str, float] = field(default_factory=dict)


@dataclass
class Plan:
    """What a run would generate, and how long it should take."""

    rows: dict[str, int] = field(default_factory=dict)  # split/kind -> rows
    n_rows: int = 0
    n_concepts: int = 0
    max_new_tokens: int = 0
    speed: Speed | None = None
    speed_note: str = ""

    @property
    def max_tokens(self) -> int:
        return self.n_rows * self.max_new_tokens

    @property
    def seconds(self) -> float | None:
        """The generation's estimate: the tokens at the earlier run's speed."""
        if self.speed is None or self.speed.tokens_per_second <= 0:
            return None
        return self.max_tokens / self.speed.tokens_per_second

    @property
    def total_seconds(self) -> float | None:
        """Every stage: the generation's estimate plus the earlier run's other stages."""
        if self.seconds is None or self.speed is None:
            return None
        return self.seconds + sum(self.speed.other_stages.values())

    def to_dict(self) -> dict:
        return {
            "rows": dict(self.rows),
            "n_rows": self.n_rows,
            "n_concepts": self.n_concepts,
            "max_new_tokens": self.max_new_tokens,
            "max_tokens": self.max_tokens,
            "tokens_per_second": self.speed.tokens_per_second if self.speed else None,
            "speed_from": (
                {
                    "run_id": self.speed.run_id,
                    "run_name": self.speed.run_name,
                    "match": self.speed.match,
                }
                if self.speed
                else None
            ),
            "estimated_seconds": self.seconds,
            "estimated_other_stages_seconds": dict(self.speed.other_stages) if self.speed else {},
            "estimated_total_seconds": self.total_seconds,
            "note": self.speed_note,
        }


def _kind(meta: dict) -> str:
    if meta["strength"] == 0:
        return "unsteered"
    if meta["arm"] == CONCEPT_ARM:
        return "concept direction"
    if meta["arm"].startswith("random:"):
        return "random directions (null)"
    return f"{meta['arm']} arm"


def count_rows(config: ExperimentConfig, graph: ConceptGraph) -> dict[str, int]:
    """Rows per split and kind, from the plan (held-out selection adds its β grid)."""
    counts: Counter[str] = Counter()
    splits = ["selection", "report"] if config.selection.mode == "heldout" else ["report"]
    for split in splits:
        for _key, meta in planned_rows(config, graph, split):
            counts[f"{split}: {_kind(meta)}"] += 1
    return dict(sorted(counts.items()))


def recent_speed(experiment: str, model: str) -> tuple[Speed | None, str]:
    """The newest finished Phase 5 run's generation speed, preferring this machine and
    the same model; (None, why) when the store has none."""
    try:
        tracking.require_store()
    except LookupError:
        return None, f"no MLflow store at {tracking.tracking_uri()} yet"
    c = tracking.client()
    exp = c.get_experiment_by_name(experiment)
    if exp is None:
        return None, f"no experiment {experiment!r} in the store yet"
    runs = c.search_runs(
        [exp.experiment_id],
        filter_string=(
            "tags.phase = '5' and attributes.status = 'FINISHED' "
            "and tags.mlflow.parentRunId IS NULL"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=200,
    )
    runs = [r for r in runs if r.data.metrics.get(SPEED_METRIC)]
    if not runs:
        return None, "no finished run in the store has a generation speed yet"
    host = platform.node()
    wanted = {model, EMBEDDED_ID if model == "embedded" else model}
    choices = (
        (
            "this machine, same model",
            lambda r: r.data.tags.get(HOST_TAG) == host and r.data.params.get("model") in wanted,
        ),
        ("this machine", lambda r: r.data.tags.get(HOST_TAG) == host),
        ("another machine", lambda r: True),
    )
    for match, test in choices:
        found = next((r for r in runs if test(r)), None)
        if found is not None:
            speed = Speed(
                found.info.run_id,
                found.info.run_name or found.info.run_id,
                float(found.data.metrics[SPEED_METRIC]),
                match,
                other_stages(found.data.metrics),
            )
            return speed, ""
    return None, ""  # pragma: no cover - the last choice takes any run


NOT_ESTIMATED = {"generation", "classifiers"}  # estimated from tokens; once per probe set


def other_stages(metrics: dict[str, float]) -> dict[str, float]:
    """A run's ``time/<stage>`` metrics other than the generation and classifier training."""
    return {
        k.removeprefix("time/"): float(v)
        for k, v in sorted(metrics.items())
        if k.startswith("time/") and k.removeprefix("time/") not in NOT_ESTIMATED
    }


def plan_run(config: ExperimentConfig, graph: ConceptGraph) -> Plan:
    rows = count_rows(config, graph)
    speed, note = recent_speed(config.experiment, config.model)
    return Plan(
        rows=rows,
        n_rows=sum(rows.values()),
        n_concepts=len(graph.concepts),
        max_new_tokens=config.generation.max_new_tokens,
        speed=speed,
        speed_note=note,
    )
