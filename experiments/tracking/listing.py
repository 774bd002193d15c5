"""Every phase's runs with their verdicts, for ``steer-eval runs``.

A run's verdicts are read from its ``criteria.csv`` (every phase writes it from its
answer: ``experiments/answer.py``), from the run folder when it is on this machine, else
from the run's MLflow artefact, so a listing says exactly what each run's answer says
and works against a remote store too. Only top-level runs are listed (children are cells
of their parent), of every kind: Phase 4's classifiers, Phase 5, the study, Phase 6,
identify and the strength sweeps (``calibrate-strength``), each under its experiment. A
run whose answer has no verdicts (a strength sweep: the range it found) shows its answer's
first note (:data:`ANSWER_NOTE_TAG`); a Phase 5 run's correlation corrected for
unreliability follows the observed verdict it corrects (from the run's metrics).
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from experiments import tracking
from experiments.rundir import RESCORED_TAG, RunDir, restore
from metrics.intervals import Interval

if TYPE_CHECKING:
    from mlflow.entities import Run

CRITERIA_FILE = RunDir.CRITERIA
# The answer's first note, on every parent run the publisher mirrors (what a run without
# verdicts, a strength sweep, answered).
ANSWER_NOTE_TAG = "steer_eval.answer_note"
# Phase 5's correlations corrected for unreliability: (the verdict key they follow, its
# metric without the sign) per sign.
CORRECTED = (("v2_predictor_vs_effect", "correlation/predictor_vs_effect_{sign}/corrected"),)
# How a corrected correlation is labelled: r / √(rel_x · rel_y) is no correlation's bound,
# so its value and interval can exceed 1 (the reliabilities' sampling error, unclipped).
CORRECTED_LABEL = "corrected for unreliability (can exceed 1)"
SIGN_GROUPS = {"pos": "s > 0", "neg": "s < 0"}  # experiments.answer.SIGN_LABELS
# A run's settings ``runs --json`` shows: name -> its parameters, the headline one first
# (Phase 5 and 6 log the headline; every phase logs its config as ``config.<key>``).
SETTINGS = {
    "model": ("model", "config.model"),
    "layer": ("layer", "config.layer"),
    "beta": ("beta", "config.steering.beta"),
    "vector_source": ("vector_source", "config.steering.vector_source"),
    "vector_file": ("config.steering.vector_file",),
    "seed": ("seed", "config.seed"),
}
Setting = str | int | float | None


# What ``--json`` shows of each verdict.
@dataclass
class ListedVerdict:
    """One verdict of a run's answer, as its criteria.csv row says: its value, interval
    and the reason for its status (why not evaluable) in one Interval."""

    key: str
    group: str
    label: str
    status: str
    interval: Interval
    reading: str = ""  # the answer's reading of the interval against the threshold

    def to_dict(self) -> dict[str, object]:
        """As ``runs --json`` writes it: the interval's ends and reason as fields."""
        i = self.interval
        return {"label": self.label, "status": self.status, "value": i.estimate, "low": i.low,
                "high": i.high, "reason": i.reason, "reading": self.reading}  # fmt: skip


@dataclass
class ListedRun:
    """A top-level run: where it is, how it ended, and its answer's verdicts."""

    experiment: str
    run_id: str
    name: str
    phase: str
    status: str
    started: str
    verdicts: list[ListedVerdict] = field(default_factory=list)
    note: str = ""  # why there are no verdicts (still running, no answer written)
    # what tells runs apart (its parameters, :data:`SETTINGS`; None where it logs none)
    settings: dict[str, Setting] = field(default_factory=dict)
    rescored_with: str = ""  # the settings a rescore changed (``rundir.rescore_changes``)

    def by_group(self) -> dict[str, list[ListedVerdict]]:
        """The verdicts per group (a sign, or "both signs"), in the answer's order."""
        out: dict[str, list[ListedVerdict]] = {}
        for v in self.verdicts:
            out.setdefault(v.group, []).append(v)
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdicts"] = {
            group: {v.key: v.to_dict() for v in verdicts}
            for group, verdicts in self.by_group().items()
        }  # fmt: skip
        return data


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_criteria(text: str) -> list[ListedVerdict]:
    """The verdicts of a ``criteria.csv`` (cells written neutralised, read back restored);
    the seed's criteria (no interval, group "both signs") are kept too."""
    rows = csv.DictReader(io.StringIO(text))
    return [
        ListedVerdict(
            key=restore(row["key"]),
            group=restore(row["group"]),
            label=restore(row["label"]),
            status=restore(row["status"]),
            interval=Interval(
                _float(row["value"]),
                _float(row["low"]),
                _float(row["high"]),
                reason=restore(row.get("reason") or ""),
            ),
            reading=restore(row.get("reading") or ""),
        )
        for row in rows
    ]


def _criteria_text(run: Run) -> str | None:
    local = RunDir.locate(run).file(CRITERIA_FILE)
    if local.exists():
        return local.read_text(encoding="utf-8")
    if not tracking.has_artifact(run.info.run_id, CRITERIA_FILE):
        return None
    path = tracking.client().download_artifacts(run.info.run_id, CRITERIA_FILE)
    with open(path, encoding="utf-8") as f:
        return f.read()


def list_runs(experiments: list[str] | None = None, limit: int = 20) -> list[ListedRun]:
    """The newest ``limit`` top-level runs of each experiment in the store (or of
    ``experiments``), newest first, each with its verdicts."""
    tracking.require_store()
    c = tracking.client()
    found = [e for e in c.search_experiments() if experiments is None or e.name in experiments]
    missing = set(experiments or ()) - {e.name for e in found}
    if missing:
        known = ", ".join(sorted(e.name for e in c.search_experiments())) or "none"
        raise LookupError(
            f"no experiment {', '.join(sorted(missing))} in {tracking.tracking_uri()} "
            f"(experiments there: {known})"
        )
    out = []
    for exp in sorted(found, key=lambda e: e.name):
        runs = c.search_runs(
            [exp.experiment_id],
            filter_string="tags.mlflow.parentRunId IS NULL",
            order_by=["attributes.start_time DESC"],
            max_results=limit,
        )
        for run in runs:
            if not run.data.tags.get("phase"):
                continue  # not one of the suite's runs (an evaluation, a stray run)
            listed = ListedRun(
                experiment=exp.name,
                run_id=run.info.run_id,
                name=run.info.run_name or "",
                phase=run.data.tags["phase"],
                status=run.info.status,
                started=datetime.fromtimestamp(run.info.start_time / 1000, UTC).strftime(
                    "%Y-%m-%d %H:%M"
                ),
                settings=settings_of(run.data.params),
                rescored_with=run.data.tags.get(RESCORED_TAG, ""),
            )
            text = _criteria_text(run)
            if text is not None:
                listed.verdicts = with_corrected(parse_criteria(text), run.data.metrics)
            if not listed.verdicts:
                listed.note = run.data.tags.get(ANSWER_NOTE_TAG) or {
                    "RUNNING": "no answer yet (still running)",
                    "FINISHED": "no answer (this kind of run writes none)",
                }.get(run.info.status, f"no answer ({run.info.status.lower()} before one)")
            out.append(listed)
    return out


def settings_of(params: dict[str, str]) -> dict[str, Setting]:
    """A run's :data:`SETTINGS` from its parameters, numbers as numbers (None: not
    logged by its kind of run)."""
    found = {
        name: next((params[k] for k in keys if params.get(k) not in (None, "", "None")), None)
        for name, keys in SETTINGS.items()
    }
    return {name: _number_or_text(value) for name, value in found.items()}


def _number_or_text(text: str | None) -> Setting:
    if text is None:
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def with_corrected(verdicts: list[ListedVerdict], metrics: dict[str, float]) -> list[ListedVerdict]:
    """``verdicts`` with each corrected correlation the run logged right after the
    observed verdict it corrects (status ``corrected``: a value, not a verdict)."""
    out = []
    for v in verdicts:
        out.append(v)
        for key, metric in CORRECTED:
            for sign, group in SIGN_GROUPS.items():
                name = metric.format(sign=sign)
                if v.key != f"{key}_{sign}" or name not in metrics:
                    continue
                out.append(
                    ListedVerdict(
                        key=f"{key}_{sign}_corrected",
                        group=group,
                        label=f"{v.label}, {CORRECTED_LABEL}",
                        status="corrected",
                        interval=Interval(
                            metrics[name], metrics.get(f"{name}/low"), metrics.get(f"{name}/high")
                        ),
                    )
                )
    return out
