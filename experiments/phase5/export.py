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

A run that steered a vector file as deployed (``steering.layers``, ``steering.scale``)
exports every layer it steered: ``direction.<N>`` per layer, each what the run's hook
added there at s = +1 (k·v_N with scale file, β·α_N·v_N/‖v_N‖ with unit), so llama.cpp
applying the whole file steers the same layers at the same scale (``export --check``).
The mapping then also holds ``<synset>:direction.<N>`` per steered layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.concepts import ConceptGraph
from experiments.kernel.lifecycle import load_graph
from experiments.kernel.probes import FORMAT_AXIS_FILE, ProbeSet, load_format_axis, probe_path
from experiments.kernel.vectors import as_deployed, concept_vectors, imported_layers
from experiments.phase5.run import read_betas
from experiments.record import RunRecord, steered_intervention
from experiments.rundir import RunDir
from steering.files import give_file_mode
from steering.probes import LinearProbe
from steering.vector import layer_tuple
from steering.vector_files import UNIT_KEY, write_control_vector, write_mapping

if TYPE_CHECKING:
    from experiments.config import RunConfig

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
    scales: dict[str, float]  # α·β per concept (at the run's layer)
    files: dict[str, str]  # concept -> GGUF file name
    layers: list[int] | None = None  # every steered layer, when several were

    def to_dict(self) -> dict[str, object]:
        return {
            "format": EXPORT_FORMAT,
            "model_id": self.model_id,
            "layer": self.layer,
            "layers": self.layers or [self.layer],
            "layer_convention": "direction.<N> steers the output of 0-based decoder block N "
            "(llama.cpp, repeng and this suite's `layer` agree)",
            "alpha": self.alpha,
            "scales": self.scales,
            "gguf": self.files,
            "safetensors": MAPPING,
        }


def _model_hint(config: RunConfig, model_id: str) -> str:
    """``controlvector.model_hint``: the model's ``config.model_type`` (``gemma3_text``),
    as repeng writes it (a hint only: llama.cpp never reads it; repeng and our import
    warn when it is not the loaded model's), or the model id when the config cannot be
    read here."""
    try:
        from steering.preflight import read_model

        return read_model(config.model_spec).model_type or model_id
    except Exception:  # a hint is never worth failing an export for
        return model_id


def _run_probes(run_dir: RunDir, graph: ConceptGraph, record: RunRecord) -> ProbeSet:
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
        load_format_axis(directory, record.model_id, record.layer)
        if (directory / FORMAT_AXIS_FILE).exists()
        else None
    )
    return ProbeSet(directory, probes, format_axis=axis)


def deployed_metadata(config: RunConfig, by_layer: dict[int, Any]) -> dict[str, str]:
    """A file steered as deployed: its layers and what scaled them, as metadata."""
    if not as_deployed(config):
        return {}
    steering = config.steering
    scale = (
        f"file (its own vectors × coefficient {steering.coefficient:g})"
        if steering.scale == "file"
        else f"unit (each layer's unit vector × β {steering.beta}·α_N)"
    )
    return {
        "steer_eval.layers": ",".join(map(str, sorted(by_layer))),
        "steer_eval.intervention": f"steering.layers {steering.layers}, scale {scale}",
    }


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
    probes = _run_probes(run_dir, graph, record)
    hidden = len(next(iter(probes.probes.values())).weight)
    layered, alphas = None, None
    if as_deployed(config):  # the file read again, each layer's α_l from the record
        found = steered_intervention(record.diagnostics)
        if found is None:
            raise ExportError(f"run {run_dir.run_id}'s record lacks its intervention")
        alphas = {int(n): a for n, a in found.alphas.items()}
        layered = imported_layers(config, graph, hidden, record.layer)
    vectors = concept_vectors(
        config, graph, probes, record.layer, record.alpha, record.model_id, hidden,
        layered=layered, alphas=alphas,
    )  # fmt: skip
    betas = read_betas(run_dir) or {}
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    import numpy as np

    hint = _model_hint(config, record.model_id)
    scales, files, scaled = {}, {}, {}
    steered: set[int] = set()
    for synset, vector in vectors.items():
        beta = float(betas.get(synset, vector.beta))
        # What the run's hook added at s = +1: the float32 coefficient times the direction.
        unit = vector.direction
        coefficient = replace(vector, beta=beta).coefficients(1.0)
        added = coefficient * vector.added()
        layers = layer_tuple(vector.layers)
        by_layer = dict(zip(layers, added.reshape(len(layers), -1).numpy(), strict=True))
        by_layer = {n: v for n, v in by_layer.items() if v.any()}  # none where a file lacks it
        steered |= set(by_layer)
        scales[synset] = beta * record.alpha
        if as_deployed(config):  # α·β equivalent: the norm added at the run's layer, s = 1
            at = by_layer.get(record.layer)
            scales[synset] = 0.0 if at is None else float(np.linalg.norm(at.astype(np.float64)))
        scaled[synset] = by_layer.get(record.layer, (coefficient * unit).numpy())
        for n, v in by_layer.items():
            if n != record.layer:
                scaled[f"{synset}:direction.{n}"] = v
        name = f"{synset}.gguf"
        write_control_vector(
            folder / name,
            by_layer,
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
                **deployed_metadata(config, by_layer),
                UNIT_KEY: unit.numpy(),
            },
        )
        files[synset] = name
    several = sorted(steered) if as_deployed(config) else None
    result = Export(
        folder, record.model_id, record.layer, float(record.alpha), scales, files, several
    )
    write_mapping(
        folder / MAPPING,
        scaled,
        {
            "model": record.model_id,
            "layer": str(record.layer),
            "alpha": repr(float(record.alpha)),
            "scales": json.dumps(scales),
            "run_id": run_dir.run_id,
            "scaled": "alpha*beta*unit direction, as steered at s = +1"
            + ("; <synset>:direction.<N>: what it added at layer N" if several else ""),
            **({"layers": ",".join(map(str, several))} if several else {}),
        },
    )
    give_file_mode(folder / MAPPING)  # safetensors writes 0600; the folder's others: open()'s
    manifest = {**result.to_dict(), "run_id": run_dir.run_id}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return result
