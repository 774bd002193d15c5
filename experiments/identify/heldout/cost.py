"""What an identify concept costs, per stage, and the shard size a time budget holds.

Measured, never assumed: from an earlier finished identify run of the same model on the
same device (the dry run's reference, ``kernel/estimate.earlier_estimate``), its stage
timings (the record's ``timings``, the same as its ``time/<stage>`` metrics) divided by
the concepts it ran; else from ``bench/identify_stage_costs.json``, or a sibling
``bench/identify_stage_costs-<model>.json``, measured on the same model and device.
Stages paid once per run whatever its concepts (:data:`FIXED`) are not divided. The shard
size is the most concepts whose cost, with the fixed stages, fits the budget.

A stage that works per direction (:data:`PER_DIRECTION`: fitting, scoring, steering the
likelihood and the readout of each) costs in proportion to the directions a concept has,
so costs measured on one grid are scaled to another's (:meth:`StageCosts.for_grid`: 23
directions per concept measured, 66 planned: those stages × 66/23), and the line says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from experiments.kernel.estimate import Plan

BENCH = Path("bench/identify_stage_costs.json")
# Stages an identify run pays once, whatever its concepts (loading, opening and closing
# the MLflow run, the figures and files; a child run per manipulation, not per concept).
FIXED = frozenset({"model_load", "mlflow_open", "figures", "views", "mlflow_parent", "child_runs"})
NOT_STAGES = frozenset({"total"})  # the record's sum of the others
# Stages whose cost grows with the directions per concept (the rest: with the concept)
PER_DIRECTION = frozenset({"directions", "detection", "likelihood", "readout"})


@dataclass(frozen=True)
class StageCosts:
    """Seconds per stage: per concept, and once per run."""

    source: str  # where they were measured (a run, or the bench file)
    n_concepts: int
    per_concept: dict[str, float]
    fixed: dict[str, float] = field(default_factory=dict)
    model_id: str | None = None
    device: str | None = None
    directions: float | None = None  # directions per concept where measured (None: unknown)
    scaled_from: float | None = None  # set by for_grid: the measured directions per concept

    @property
    def concept_seconds(self) -> float:
        return sum(self.per_concept.values())

    @property
    def fixed_seconds(self) -> float:
        return sum(self.fixed.values())

    def for_grid(self, directions: int | None) -> StageCosts:
        """The costs of a grid of ``directions`` per concept: the per-direction stages
        scaled by its ratio to the measured grid's (unchanged when either is unknown or
        they are the same)."""
        if not self.directions or directions in (None, self.directions):
            return self
        ratio = directions / self.directions
        per_concept = {
            k: v * ratio if k in PER_DIRECTION else v for k, v in self.per_concept.items()
        }
        return replace(
            self, per_concept=per_concept, directions=float(directions),
            scaled_from=self.directions,
        )  # fmt: skip

    def seconds(self, n_concepts: int) -> float:
        """A run of ``n_concepts`` concepts."""
        return self.fixed_seconds + n_concepts * self.concept_seconds

    def shard_size(self, budget_minutes: float) -> int:
        """The most concepts a run may hold to finish within ``budget_minutes`` (0: not
        even one)."""
        if self.concept_seconds <= 0:
            raise ValueError(f"{self.source} measured no per-concept time")
        room = budget_minutes * 60 - self.fixed_seconds
        return max(0, math.floor(room / self.concept_seconds))

    def to_dict(self, budget_minutes: float | None = None) -> dict[str, object]:
        out: dict[str, object] = {
            "source": self.source,
            "model_id": self.model_id,
            "device": self.device,
            "n_concepts": self.n_concepts,
            "per_concept_seconds": dict(self.per_concept),
            "fixed_seconds": dict(self.fixed),
            "concept_seconds": self.concept_seconds,
            "directions_per_concept": self.directions,
            "scaled_from_directions": self.scaled_from,
        }
        if budget_minutes is not None:
            out["budget_minutes"] = budget_minutes
            out["shard_size"] = self.shard_size(budget_minutes)
        return out


def costs_from_timings(
    timings: dict[str, float],
    n_concepts: int,
    source: str,
    model_id: str | None = None,
    device: str | None = None,
    directions: float | None = None,
) -> StageCosts:
    """A run's stage timings split into per-concept and fixed costs (``directions``: the
    run's directions per concept, when known)."""
    if n_concepts < 1:
        raise ValueError(f"{source}: a run of {n_concepts} concepts measures no concept")
    stages = {k: float(v) for k, v in timings.items() if k not in NOT_STAGES}
    return StageCosts(
        source=source,
        n_concepts=n_concepts,
        per_concept={k: v / n_concepts for k, v in stages.items() if k not in FIXED},
        fixed={k: v for k, v in stages.items() if k in FIXED},
        model_id=model_id,
        device=device,
        directions=directions,
    )


def costs_from_record(path: str | Path, device: str | None = None) -> StageCosts:
    """The costs a finished identify run measured (its folder or its ``analysis.json``):
    its timings over its concepts (the stored config's ``concepts.synsets``)."""
    path = Path(path)
    if path.is_dir():
        path = path / "analysis.json"
    record = json.loads(path.read_text(encoding="utf-8"))
    concepts = ((record.get("config") or {}).get("concepts") or {}).get("synsets") or []
    table = path.parent / "directions.csv"
    directions = None
    if table.is_file() and concepts:  # one row per concept × direction, and a header
        with table.open(encoding="utf-8") as handle:
            directions = (sum(1 for _ in handle) - 1) / len(concepts)
    return costs_from_timings(
        record.get("timings") or {}, len(concepts), str(path.parent), record.get("model_id"),
        device, directions,
    )  # fmt: skip


def read_bench(path: Path = BENCH) -> StageCosts | None:
    """The committed costs (None: the file is missing or not measured yet)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not data.get("per_concept_seconds") or not data.get("n_concepts"):
        return None
    return StageCosts(
        source=f"{path} ({data.get('source', '?')})",
        n_concepts=int(data["n_concepts"]),
        per_concept={k: float(v) for k, v in data["per_concept_seconds"].items()},
        fixed={k: float(v) for k, v in (data.get("fixed_seconds") or {}).items()},
        model_id=data.get("model_id"),
        device=data.get("device"),
        directions=data.get("directions_per_concept"),
    )


def plan_costs(
    plan: Plan, bench: Path = BENCH, directions: int | None = None
) -> tuple[StageCosts | None, str]:
    """The costs for a dry run's plan: its reference run's (same model, device, vector
    source, machine), else the bench file's when it was measured on the same model and
    device; else (None, why). ``directions``: the plan's directions per concept, to which
    the per-direction stages are scaled."""
    from experiments import tracking
    from experiments.rundir import RUN_DIR_TAG

    device = f"{plan.model.device.type}/{plan.model.dtype_name}"
    if plan.estimate is not None:
        try:
            folder = tracking.get_run(plan.estimate.run_id).data.tags.get(RUN_DIR_TAG)
            if folder:
                return costs_from_record(folder, device).for_grid(directions), ""
        except (OSError, ValueError, KeyError):
            pass
    # the bench file, or a sibling measured on another model (``<stem>-<model>.json``)
    files = [bench, *sorted(bench.parent.glob(f"{bench.stem}-*{bench.suffix}"))]
    measured = [c for c in map(read_bench, files) if c is not None]
    for found in measured:
        if found.model_id == plan.model.model_id and found.device == device:
            return found.for_grid(directions), ""
    if not measured:
        return None, f"no earlier run to measure from, and {bench} is not measured yet"
    on = ", ".join(f"{c.model_id} ({c.device})" for c in measured)
    return None, (
        f"no earlier run to measure from; {bench} and its siblings were measured on {on}, "
        f"not {plan.model.model_id} ({device})"
    )


def cost_lines(costs: StageCosts | None, why: str, budget_minutes: float) -> list[str]:
    """The dry run's lines: each stage's seconds per concept, and the shard size."""
    if costs is None:
        return [f"no stage costs: {why}"]
    stages = ", ".join(
        f"{k} {v:.1f} s" for k, v in sorted(costs.per_concept.items(), key=lambda kv: -kv[1])
    )
    size = costs.shard_size(budget_minutes)
    scaled = (
        f"; {', '.join(sorted(PER_DIRECTION))} scaled from {costs.scaled_from:g} to "
        f"{costs.directions:g} directions per concept"
        if costs.scaled_from and costs.directions
        else ""
    )
    return [
        f"cost per concept (from {costs.source}, {costs.n_concepts} concepts, "
        f"{costs.device}{scaled}): {costs.concept_seconds / 60:.1f} min: {stages}; once per "
        f"run {costs.fixed_seconds / 60:.1f} min",
        f"shard size for a {budget_minutes:g}-minute budget: {size} concepts "
        f"(identify.shard_size; about {costs.seconds(size) / 60:.0f} min)",
    ]
