"""The pooled held-out scorings as runs (each a :class:`~experiments.kernel.study.Study`):
``identify pool`` opens one MLflow run in the study's experiment through ``run_study``,
scores the pre-registered primaries once on the committed shards
(``identify/heldout/shards.pool``), and publishes the typed :class:`PooledRecord`
through the kernel: its answer, metrics, the shards it read as tags, the ledger entry
mirrored on it. ``identify pool --exploratory`` is a run the same way
(:class:`ExploratoryStudy`, ``pooled_exploratory``; it scores nothing). The committed
``pooled/`` folder beside the shards keeps the files it always had; no model is loaded."""

from __future__ import annotations

import json
from dataclasses import dataclass

from experiments.answer import Answer, Verdict
from experiments.config import IdentifyStudyConfig, Phase
from experiments.identify.answer import PRIMARY_STATUS
from experiments.identify.heldout.prereg import Preregistration
from experiments.identify.heldout.shards import (
    POOLED_RECORD,
    PoolInputs,
    ShardRun,
    pool_inputs,
    pooled_markdown,
    score_pool,
)
from experiments.identify.publish import put_interval
from experiments.kernel.lifecycle import RunSession
from experiments.kernel.publisher import ChildRun, Views
from experiments.kernel.study import Begun, Finished, Opening
from experiments.record.pooled import ExploratoryRecord, PooledRecord, PrimaryReading

POOLED_TAG = "identify.pooled"  # the pooled run's mark, beside its primaries' verdicts
SHARDS_TAG = "identify.shards"  # shard -> run id, as JSON


@dataclass(frozen=True)
class Pooled:
    """Beside the record: the pooled run's id."""

    run_id: str


class _PoolRun:
    """What both pooled runs share: never reopened (a second scoring is a new, forced
    run), the pre-registration as their parameters, no child runs."""

    phase: Phase | None = None

    def __init__(self, held: list[str], prereg: Preregistration) -> None:
        self.held, self.prereg = held, prereg

    def started(
        self, session: RunSession[IdentifyStudyConfig], new: bool, prepared: object
    ) -> dict[str, object]:
        return {"preregistration": str(self.prereg.path), "sha256": self.prereg.sha256}

    def children(self, record: object, products: Pooled) -> list[ChildRun]:
        return []


class PooledStudy(_PoolRun):
    """The primaries scored once on the pooled shards (``held``: the held-out concepts
    after ``identify.limit``; ``bound``: the binding every shard must carry)."""

    record_file = POOLED_RECORD

    def __init__(
        self, held: list[str], prereg: Preregistration, bound: dict[str, str], force: bool
    ) -> None:
        super().__init__(held, prereg)
        self.bound, self.force = bound, force

    def begin(self, session: RunSession[IdentifyStudyConfig]) -> Begun[PoolInputs]:
        """Refuse before any run opens: a pooled primary already scored (unless forced),
        a shard missing or run on another binding; the shards read here, once."""
        config = session.config
        inputs = pool_inputs(config, self.held, self.prereg, self.bound, self.force)
        tags = {"phase": "6-identify", POOLED_TAG: "forced" if self.force else "first",
                SHARDS_TAG: shard_runs(inputs.shards)}  # fmt: skip
        return Begun(Opening(f"pooled {config.name}", tags), inputs)

    def stages(
        self, session: RunSession[IdentifyStudyConfig], inputs: PoolInputs
    ) -> Finished[PooledRecord, Pooled]:
        run_id = session.parent_id
        session.say("pooling the held-out shards (wild cluster bootstrap)")
        record = score_pool(session.config, self.prereg, self.bound, inputs, run_id)
        return Finished(record, Pooled(run_id))

    def views(self, record: PooledRecord, products: Pooled) -> Views:
        """The answer (one verdict per primary, at the level Holm read it), the summary
        (the committed ``answer.md``), a metric per primary, the verdicts as tags."""
        positive = record.primary.spec.hypothesis == "positive"
        verdicts = [
            Verdict(
                key=f"primary/{r.name}",
                label=f"{r.name}: {r.estimator} (read at {r.confidence:.3f}, Holm step "
                f"{r.holm_step or 'none'})",
                group="pre-registered primaries, pooled over the held-out shards",
                interval=r.slope,
                status=PRIMARY_STATUS.get(r.verdict, "not_evaluable"),
                threshold=0.0,
                n=r.slope.n_clusters or None,
                claim=f"detection quality predicts the effect ({r.verdict.replace('_', ' ')})",
                symbol="slope ",
                direction="above" if positive else "below",
                description=record.label,
            )
            for r in readings(record)
        ]
        floors = [
            f"{name}: the likelihood's reliability on its rows {f.pooled.estimate:.3f} "
            f"(floor {f.floor:g}: {'met' if f.met else 'not met, so uninformative'})"
            for name, f in (record.reliability_floor or {}).items()
            if f.pooled.estimate is not None
        ]
        answer = Answer(
            phase="identify",
            run_id=products.run_id,
            question=(
                "Pre-registered, scored once on the pooled held-out shards: within concepts, "
                "does the better detector raise the concept's likelihood more?"
            ),
            confidence=0.95,
            verdicts=verdicts,
            notes=[f"{record.label}; {record.n_concepts} concepts", *floors],
        )
        metrics: dict[str, float | None] = {}
        for r in readings(record):
            for end, value in (("slope", r.slope.estimate), ("low", r.slope.low),
                               ("high", r.slope.high)):  # fmt: skip
                metrics[f"primary/{r.name}/{end}"] = value
        tags = {f"{POOLED_TAG}.{r.name}": r.verdict for r in readings(record)}
        return Views(
            answer=answer,
            summary=pooled_markdown(record),
            metrics=metrics,
            tags=tags,
            experiment=record.experiment,
        )


def shard_runs(shards: list[ShardRun]) -> str:
    """The shards a pooled run read, as its tag: shard -> run id (JSON)."""
    return json.dumps({str(s.shard): s.run_id for s in shards})


def readings(record: PooledRecord) -> list[PrimaryReading]:
    """The primaries as read: Holm's readings with co-primaries, else the one primary."""
    if record.primaries:
        return record.primaries
    p = record.primary
    return [
        PrimaryReading(
            name=p.spec.label("primary"), verdict=p.verdict, confidence=0.95,
            holm_step=1, spec=p.spec.model_dump(exclude_none=True), slope=p.slope,
            estimator=p.estimator, manipulations=p.manipulations, left_out=p.left_out,
        )
    ]  # fmt: skip


class ExploratoryStudy(_PoolRun):
    """Every estimand on the pooled shards, after the primary was scored (exploratory)."""

    record_file = "exploratory.json"

    def begin(self, session: RunSession[IdentifyStudyConfig]) -> Begun[list[ShardRun]]:
        """Refuse before any run opens: the primary not scored yet, a shard missing; the
        shards read here, once."""
        from experiments.identify.pooled_exploratory import exploratory_shards

        config = session.config
        shards = exploratory_shards(config, self.held, self.prereg)
        tags = {"phase": "6-identify", POOLED_TAG: "exploratory",
                SHARDS_TAG: shard_runs(shards)}  # fmt: skip
        return Begun(Opening(f"pooled exploratory {config.name}", tags), shards)

    def stages(
        self, session: RunSession[IdentifyStudyConfig], shards: list[ShardRun]
    ) -> Finished[ExploratoryRecord, Pooled]:
        from experiments.identify.pooled_exploratory import explore_shards

        session.say("the exploratory estimands on the pooled shards (bootstrap)")
        record = explore_shards(session.config, self.prereg, shards)
        return Finished(record, Pooled(session.parent_id))

    def views(self, record: ExploratoryRecord, products: Pooled) -> Views:
        from experiments.identify.answer import estimand_row
        from experiments.identify.pooled_exploratory import exploratory_markdown

        answer = Answer(
            phase="identify",
            run_id=products.run_id,
            question="Exploratory, after the pooled primary was scored: every estimand on "
            "the same pooled held-out shards, each its own question.",
            confidence=0.95,
            verdicts=[estimand_row(name, e) for name, e in record.estimands.items()],
            notes=[record.label],
        )
        metrics: dict[str, float | None] = {}
        for name, e in record.estimands.items():
            put_interval(metrics, f"estimand/{name}", e.fit)
        return Views(
            answer=answer,
            summary=exploratory_markdown(record),
            metrics=metrics,
        )
