"""Hand a run's directions on: GGUF control vectors for llama.cpp and a safetensors map.

Each concept's vector is written scaled as the run steered it, α·β·v (β per concept
when it was chosen on held-out prompts), so llama.cpp's ``--control-vector <file>``
adds what the run added at strength s = +1 and ``--control-vector-scaled <file> s``
what it added at s. The vectors are rebuilt from the run's record and classifier folder
without loading the model (``kernel/vectors.concept_vectors``, the code the run used).

Written into the output folder:

- ``<synset>.gguf``: one control vector per concept, ``direction.<layer>`` (the layer
  layout is checked in ``steering/vector_files.py``), with ``steer_eval.*`` metadata: the
  model, the layer, α, β, the scale α·β, the run and the exact unit direction;
- ``directions.safetensors``: ``synset → α·β·v`` with the same facts as string metadata;
- ``export.json``: the manifest (model, layer, scale per concept, files).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.concepts import ConceptGraph
from experiments.kernel.lifecycle import load_graph
from experiments.kernel.probes import FORMAT_AXIS_FILE, ProbeSet, load_format_axis, probe_path
from experiments.kernel.vectors import concept_vectors
from experiments.rundir import RunDir
from steering.probes import LinearProbe
from steering.vector_files import UNIT_KEY, write_control_vector, write_mapping

if TYPE_CHECKING:
    from experiments.config import ExperimentConfig

EXPORT_FORMAT = "steer-eval/vector-export"
MANIFEST = "export.json"
MAPPING = "directions.safetensors"


class ExportError(ValueError):
    """The run cannot be exported; the message says why and what to do."""


@dataclass(frozen=True)
class Export:
    """What was written, and the facts a reader needs to use it."""

    folder: Path
    model_id: str
    layer: int
    alpha: float
    scales: dict[str, float]  # α·β per concept
    files: dict[str, str]  # concept -> GGUF file name

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": EXPORT_FORMAT,
            "model_id": self.model_id,
            "layer": self.layer,
            "layer_convention": "direction.<N> steers the output of 0-based decoder block N "
            "(llama.cpp, repeng and this suite's `layer` agree)",
            "alpha": self.alpha,
            "scales": self.scales,
            "gguf": self.files,
            "safetensors": MAPPING,
        }


def _model_hint(config: ExperimentConfig, model_id: str) -> str:
    """``controlvector.model_hint``: the model's ``config.model_type`` (``gemma3_text``),
    as repeng writes it (a hint only: llama.cpp never reads it; repeng and our import
    warn when it is not the loaded model's), or the model id when the config cannot be
    read here."""
    try:
        from steering.preflight import read_model

        return read_model(config.model_spec).model_type or model_id
    except Exception:  # a hint is never worth failing an export for
        return model_id


def _run_probes(run_dir: RunDir, graph: ConceptGraph, model_id: str, layer: int) -> ProbeSet:
    record = run_dir.read_record(migrate=True)
    if not record.classifier_dir:
        raise ExportError(f"run {run_dir.run_id}'s record names no classifier folder")
    directory = Path(record.classifier_dir)
    missing = [c.synset for c in graph.concepts if not probe_path(directory, c.synset).exists()]
    if missing:
        raise ExportError(
            f"the classifiers of run {run_dir.run_id} are not under {directory} "
            f"(missing {', '.join(missing[:3])}); export on the machine that ran it"
        )
    probes = {c.synset: LinearProbe.load(probe_path(directory, c.synset)) for c in graph.concepts}
    axis = (
        load_format_axis(directory, model_id, layer)
        if (directory / FORMAT_AXIS_FILE).exists()
        else None
    )
    return ProbeSet(directory, probes, format_axis=axis)


def export_run(run_dir: RunDir, out: str | Path) -> Export:
    """Write the run's directions as GGUF control vectors and a safetensors mapping."""
    if not run_dir.exists():
        raise ExportError(f"no run folder at {run_dir.path}; pass --results-dir")
    try:
        record = run_dir.read_record(migrate=True)
    except LookupError:
        raise ExportError(
            f"run {run_dir.run_id} has no record yet; finish it with "
            f"`steer-eval run --resume {run_dir.run_id}`"
        ) from None
    config = record.config
    if config.steering.mode != "additive":
        raise ExportError(
            f"run {run_dir.run_id} steered in {config.steering.mode} mode; a control vector "
            "is added to the residual stream, so only additive runs can be exported"
        )
    graph = load_graph(config)
    probes = _run_probes(run_dir, graph, record.model_id, record.layer)
    hidden = len(next(iter(probes.probes.values())).weight)
    vectors = concept_vectors(
        config, graph, probes, record.layer, record.alpha, record.model_id, hidden
    )
    selection = run_dir.file(RunDir.SELECTION)
    betas = (
        {k: v["beta"] for k, v in json.loads(selection.read_text())["concepts"].items()}
        if selection.exists()
        else {}
    )
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    hint = _model_hint(config, record.model_id)
    scales, files, scaled = {}, {}, {}
    for synset, vector in vectors.items():
        beta = float(betas.get(synset, vector.beta))
        # What the run's hook added at s = +1: the float32 coefficient times the direction.
        unit = vector.direction
        added = replace(vector, beta=beta).coefficients(1.0) * unit
        scales[synset] = beta * record.alpha
        scaled[synset] = added.numpy()
        name = f"{synset}.gguf"
        write_control_vector(
            folder / name,
            {record.layer: scaled[synset]},
            hint,
            {
                "steer_eval.concept": synset,
                "steer_eval.model": record.model_id,
                "steer_eval.layer": record.layer,
                "steer_eval.alpha": float(record.alpha),
                "steer_eval.beta": beta,
                "steer_eval.scale": scales[synset],
                "steer_eval.run_id": run_dir.run_id,
                "steer_eval.vector_source": config.steering.vector_source,
                UNIT_KEY: unit.numpy(),
            },
        )
        files[synset] = name
    result = Export(folder, record.model_id, record.layer, float(record.alpha), scales, files)
    write_mapping(
        folder / MAPPING,
        scaled,
        {
            "model": record.model_id,
            "layer": str(record.layer),
            "alpha": repr(float(record.alpha)),
            "scales": json.dumps(scales),
            "run_id": run_dir.run_id,
            "scaled": "alpha*beta*unit direction, as steered at s = +1",
        },
    )
    manifest = {**result.to_dict(), "run_id": run_dir.run_id}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return result
