"""The dry run of every command that loads a model: check the run, then plan it.

A dry run reads the model's config (no weights, ``steering.preflight``) through the same
resolution and checks as the loader, so it refuses what the run would refuse: a model
that is not here (with the download line), a layer out of range, a dtype the device
cannot compute in. It shows the device, dtype, layer, batch size and the stages the run
goes through.

Its time comes only from an earlier finished run of the same model, device and vector
source (on this machine): the sum of that run's stage timings from its record
(``timings``, whatever stages it holds), every stage but :data:`FIXED_STAGES` scaled by
this plan's rows × tokens over that run's, each stage shown as scaled. A run of another
model, device, vector source or machine says nothing about this one, so without such a
run the plan says "no estimate" and why. A run that started with the machine under load
(its tags: the load average over :data:`BUSY_PER_CORE` per core) ran slower than this
one may: one that did not is preferred, and when only such a run is there the plan says
so ("the reference ran with load X on N cores").
"""

from __future__ import annotations

import json
import platform
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments import tracking
from experiments.concepts import ConceptGraph
from experiments.config import CPU_BATCH_ROWS, RunConfig
from experiments.kernel.plan import CONCEPT_ARM, run_rows
from experiments.rundir import RUN_DIR_TAG, RunDir
from experiments.tracking.context import (
    COMMAND_TAG,
    CPUS_TAG,
    DEVICE_TAG,
    HOST_TAG,
    LOAD_TAG,
    MODEL_TAG,
    REOPENED_TAG,
)
from steering.preflight import ModelFacts, read_model

if TYPE_CHECKING:
    from mlflow.entities import Run

# Stages whose time does not grow with the rows generated (a model loads once whatever
# the plan); every other stage of an earlier run is scaled to this plan's rows × tokens.
FIXED_STAGES = frozenset({"model_load", "classifiers", "vectors", "centroids", "mlflow_open"})
RECORD_FILES = (RunDir.RECORD, RunDir.ANALYSIS)  # Phase 5's record; Phase 6's and identify's
# A run that started with a 1-minute load average above this per core ran under load
BUSY_PER_CORE = 0.5


@dataclass
class Estimate:
    """An earlier run's stage timings, scaled to this plan."""

    run_id: str
    run_name: str
    stages: dict[str, float]  # seconds per stage, as that run recorded them
    scale: float  # this plan's rows × tokens over that run's (per-row stages)
    load: float | None = None  # the machine's load average when that run started
    cpus: int | None = None  # and its CPU count (None: an older run, not recorded)

    @property
    def scaled(self) -> dict[str, float]:
        """Seconds per stage for this plan: the per-row stages scaled, the fixed ones not."""
        return {k: t if k in FIXED_STAGES else t * self.scale for k, t in self.stages.items()}

    @property
    def seconds(self) -> float:
        return sum(self.scaled.values())

    @property
    def under_load(self) -> bool:
        """Whether that run started with the machine busy (over BUSY_PER_CORE per core)."""
        return self.load is not None and self.load > BUSY_PER_CORE * (self.cpus or 1)

    def to_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "run_name": self.run_name,
            "stages": dict(self.stages),
            "scale": self.scale,
            "scaled_stages": self.scaled,
            "estimated_seconds": self.seconds,
            "load": self.load,
            "cpus": self.cpus,
            "under_load": self.under_load,
        }


@dataclass
class Plan:
    """What a run would load, generate and go through, and how long it should take."""

    phase: str
    model: ModelFacts
    layer: int
    batch_size: str
    stages: list[str]
    rows: dict[str, int] = field(default_factory=dict)  # split/kind -> rows (Phase 5)
    n_concepts: int = 0
    max_new_tokens: int = 0
    estimate: Estimate | None = None
    no_estimate: str = ""  # why there is none
    strength: list[str] = field(default_factory=list)  # where β and the grid would come from
    vectors: list[str] = field(default_factory=list)  # the vector file, read and checked

    @property
    def n_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def max_tokens(self) -> int:
        return self.n_rows * self.max_new_tokens

    def to_dict(self) -> dict[str, object]:
        m = self.model
        return {
            "phase": self.phase,
            "model": {
                "spec": m.spec,
                "model_id": m.model_id,
                "found_in": m.found_in,
                "source": m.source,
                "architecture": m.architecture,
                "model_type": m.model_type,
                "n_layers": m.n_layers,
                "hidden_size": m.hidden_size,
            },
            "device": str(m.device),
            "dtype": m.dtype_name,
            "layer": self.layer,
            "batch_size": self.batch_size,
            "stages": list(self.stages),
            "rows": dict(self.rows),
            "n_rows": self.n_rows,
            "n_concepts": self.n_concepts,
            "max_new_tokens": self.max_new_tokens,
            "max_tokens": self.max_tokens,
            "estimate": self.estimate.to_dict() if self.estimate else None,
            "estimated_seconds": self.estimate.seconds if self.estimate else None,
            "note": self.no_estimate,
            "strength": list(self.strength),
            "vectors": list(self.vectors),
        }


def _kind(meta: dict[str, Any]) -> str:
    if meta["strength"] == 0:
        return "unsteered"
    if meta["arm"] == CONCEPT_ARM:
        return "concept direction"
    if meta["arm"].startswith("random:"):
        return "random directions (null)"
    return f"{meta['arm']} arm"


def count_rows(config: RunConfig, graph: ConceptGraph) -> dict[str, int]:
    """Rows per split and kind, from the plan (held-out selection adds its β grid)."""
    counts = Counter(f"{meta['split']}: {_kind(meta)}" for _key, meta in run_rows(config, graph))
    return dict(sorted(counts.items()))


def phase5_stages(config: RunConfig) -> list[str]:
    """The stages a Phase 5 run times, in order (the names of its record's timings)."""
    stages = ["model_load", "classifiers", "vectors", "centroids", "mlflow_open"]
    stages += ["generation", "perplexity", "embedding"]  # selection's rows included
    if config.likelihood.enabled:
        stages.append("likelihood")
    stages += ["analysis", "measurement"]
    if config.tracking.traces:
        stages.append("traces")
        if config.tracking.evaluation:
            stages.append("evaluation")
    return [*stages, "figures", "views", "mlflow_parent", "child_runs"]


def batch_size(config: RunConfig, model: ModelFacts) -> str:
    """``generation.batch_size`` as the run would take it."""
    size = config.generation.batch_size
    if isinstance(size, int):
        return str(size)
    if model.device.type == "cuda":
        return "auto: from the card's free memory when the model is loaded"
    return f"{CPU_BATCH_ROWS} (auto on {model.device.type})"


def _device_of(run: Run) -> str | None:
    """The device type an earlier run's model ran on: its tag, else (older runs) its
    config's ``device`` as it resolves on this machine now."""
    tagged = run.data.tags.get(DEVICE_TAG)
    if tagged:
        return tagged
    device = run.data.params.get("config.device") or run.data.params.get("device")
    if device is None:
        return None
    try:
        from steering.models import pick_device

        return pick_device(device).type
    except ValueError:
        return None


def _model_of(run: Run) -> str | None:
    return run.data.tags.get(MODEL_TAG) or run.data.params.get("model")


def _rows_generated(folder: Path) -> int:
    """Every row the run generated (all arms and splits: what its stages' time covers)."""
    path = folder / RunDir.GENERATIONS
    if not path.is_file():
        return 0
    with path.open() as lines:
        return sum(1 for line in lines if line.strip())


def _load_of(run: Run) -> tuple[float | None, int | None]:
    """The load average and CPU count a run started with (its tags), or None each."""
    try:
        return float(run.data.tags[LOAD_TAG]), int(run.data.tags[CPUS_TAG])
    except (KeyError, ValueError):
        return None, None


def _record_of(run: Run) -> tuple[dict[str, float], int, str | None] | None:
    """An earlier run's stage timings, rows × tokens and vector source, from its record
    (any phase; the source from its params where the record's config has none)."""
    folder = run.data.tags.get(RUN_DIR_TAG)
    if not folder:
        return None
    for name in RECORD_FILES:
        path = Path(folder) / name
        if path.is_file():
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                return None
            timings = {
                k: float(v)
                for k, v in (record.get("timings") or {}).items()
                if k != "total"  # a study's record also holds the sum of its stages
            }
            config = record.get("config") or {}
            generation = config.get("generation") or {}
            tokens = _rows_generated(Path(folder)) * int(generation.get("max_new_tokens") or 0)
            params = run.data.params
            source = (
                (config.get("steering") or {}).get("vector_source")
                or params.get("vector_source")
                or params.get("config.steering.vector_source")
            )
            return (timings, tokens, source) if timings else None
    return None


def earlier_estimate(
    experiment: str, phase: str, model: ModelFacts, tokens: int, vector_source: str
) -> tuple[Estimate | None, str]:
    """The newest finished run of ``phase`` on this machine with the same model on the
    same device steered by the same vector source (one that did not start under load
    before one that did), its stages summed and scaled to ``tokens``; else (None, why)."""
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
            f"tags.phase = '{phase}' and attributes.status = 'FINISHED' "
            "and tags.mlflow.parentRunId IS NULL"
        ),
        order_by=["attributes.start_time DESC"],
        max_results=200,
    )
    host = platform.node()
    same = (
        r
        for r in runs
        if r.data.tags.get(HOST_TAG) == host
        and _model_of(r) == model.model_id
        and _device_of(r) == model.device.type
    )
    busy = None  # the newest that ran under load: used only when no other is there
    reopened = 0
    for run in same:
        if was_reopened(run):  # its timings cover only what ran after the reopening
            reopened += 1
            continue
        found = _record_of(run)
        if found is None or found[2] != vector_source:
            continue
        timings, earlier_tokens, _source = found
        scale = tokens / earlier_tokens if tokens and earlier_tokens else 1.0
        name = run.info.run_name or run.info.run_id
        estimate = Estimate(run.info.run_id, name, timings, scale, *_load_of(run))
        if not estimate.under_load:
            return estimate, ""
        busy = busy or estimate
    if busy is not None:
        return busy, ""
    skipped = (
        f" ({reopened} resumed or rescored, whose timings cover only the part after the "
        "reopening, left out)"
        if reopened
        else ""
    )
    return None, (
        f"no finished run of {model.model_id} on {model.device.type} with {vector_source} "
        f"vectors on this machine in {experiment!r} with stage timings{skipped}"
    )


def was_reopened(run: Run) -> bool:
    """Whether a run was resumed or rescored (:data:`REOPENED_TAG`; before the tag, its
    command line): its record's timings then miss the stages run before."""
    tags = run.data.tags
    if tags.get(REOPENED_TAG) == "true":
        return True
    command = tags.get(COMMAND_TAG, "")
    return " --resume" in command or " rescore" in command


def check_model(config: RunConfig, layer: int | None = None) -> tuple[ModelFacts, int]:
    """The config's model read from its config, and the layer the run would steer; the
    errors a load would raise, without the weights."""
    model = read_model(config.model_spec)
    return model, model.check_layer(config.layer if layer is None else layer)


def check_vector_file(
    config: RunConfig, graph: ConceptGraph, model: ModelFacts, layer: int
) -> list[str]:
    """``vector_source: file``: the file read and checked as the run reads it (one
    validator, ``imported_vectors``: hidden size from the model's config, the run's layer,
    every concept's vector, finite, non-zero; a GGUF's model hint), so a dry run stops
    with the run's VectorFileError. Lines for the plan: what was read, what was said."""
    if config.steering.vector_source != "file":
        return []
    from experiments.kernel.vectors import (
        as_deployed,
        imported_layers,
        imported_vectors,
        steered_layers,
    )

    notes: list[str] = []
    steering = config.steering
    if as_deployed(config):
        layered = imported_layers(
            config, graph, model.hidden_size, layer, model.kind, notes, model.n_layers
        )
        scale = (
            f"the file's norms × coefficient {steering.coefficient:g}"
            if steering.scale == "file"
            else "each layer's α_l·β"
        )
        return [
            f"vectors: {len(layered.anchor)} concepts read from {steering.vector_file} and "
            f"checked (hidden size {model.hidden_size}, layer {layer}); steering layers "
            f"{list(steered_layers(layered))} at {scale}",
            *notes,
        ]
    vectors = imported_vectors(config, graph, model.hidden_size, layer, model.kind, notes)
    assert vectors is not None
    return [
        f"vectors: {len(vectors)} concepts read from {steering.vector_file} and "
        f"checked (hidden size {model.hidden_size}, layer {layer})",
        *notes,
    ]


def plan_run(
    config: RunConfig, graph: ConceptGraph, explicit: frozenset[str] = frozenset()
) -> Plan:
    """A Phase 5 run's plan (``run --dry-run``, the study's too), with the β it would take
    from the model's recorded strength range (``choose_beta``; an error where it would
    fail, as ``steering.beta: auto`` with no range)."""
    from experiments.kernel.probes import classifier_dir, graph_key
    from experiments.strength_range import choose_beta, load_range

    model, layer = check_model(config)
    vectors = check_vector_file(config, graph, model, layer)
    folder = classifier_dir(config, model.probe_id, layer, graph_key(graph))
    choice = choose_beta(config, load_range(folder), folder, explicit)
    config = choice.config  # the β and grid the run would steer with (auto resolved)
    plan = Plan(
        phase="5",
        model=model,
        layer=layer,
        batch_size=batch_size(config, model),
        stages=phase5_stages(config),
        rows=count_rows(config, graph),
        n_concepts=len(graph.concepts),
        max_new_tokens=config.generation.max_new_tokens,
        strength=[choice.message],
        vectors=vectors,
    )
    plan.estimate, plan.no_estimate = earlier_estimate(
        config.experiment, "5", model, plan.max_tokens, config.steering.vector_source
    )
    return plan


def plan_study(config: RunConfig, phase: str, stages: list[str], layer: int | None = None) -> Plan:
    """The plan of a Phase 6 study (``calibrate``, ``identify``): the model checked and
    the stages listed; its time is an earlier study's on this model and device, as it
    took (a study's work does not scale by rows alone)."""
    model, chosen = check_model(config, layer)
    plan = Plan(
        phase=phase,
        model=model,
        layer=chosen,
        batch_size=batch_size(config, model),
        stages=stages,
        max_new_tokens=config.generation.max_new_tokens,
    )
    plan.estimate, plan.no_estimate = earlier_estimate(
        config.experiment, phase, model, 0, config.steering.vector_source
    )
    return plan
