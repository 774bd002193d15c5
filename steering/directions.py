"""Direction sources: how a concept's probe becomes a steering direction.

A source is a plain callable ``(probe, context) -> unit direction`` registered under
the name that ``steering.vector_source`` selects, in the spirit of steering-vectors'
aggregators: a new way to pick a direction is a new function here, not a new branch
in the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from steering.probes import LinearProbe, ProbeError
from steering.registry import Registry, UnknownName


@dataclass(frozen=True)
class DirectionContext:
    """What a source may use besides the probe (e.g. a nuisance axis to project out)."""

    format_axis: np.ndarray | None = None  # unit question-minus-statement axis, same layer
    # Vectors read from steering.vector_file (steering/vector_files.py), by synset id.
    imported: Mapping[str, np.ndarray] | None = None


DirectionSource = Callable[[LinearProbe, DirectionContext], np.ndarray]
_SOURCES: Registry[DirectionSource] = Registry("direction source")


def direction_source(name: str) -> Callable[[DirectionSource], DirectionSource]:
    """Register a direction source under ``name``."""
    return _SOURCES.register(name)


def get_direction_source(name: str) -> DirectionSource:
    try:
        return _SOURCES[name]
    except UnknownName as exc:
        raise ProbeError(str(exc)) from None


def _checked(vector: np.ndarray, what: str) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0:
        raise ProbeError(f"{what} is zero or not finite; retrain with `make classifiers`")
    return vector


@direction_source("classifier")
def probe_weight(probe: LinearProbe, _ctx: DirectionContext) -> np.ndarray:
    """The probe's unit weight in raw residual space, signed toward the concept."""
    return probe.direction()


@direction_source("diffmean")
def diffmean(probe: LinearProbe, _ctx: DirectionContext) -> np.ndarray:
    """The unit difference of means on the probe's own (format-matched) training set:
    positives minus negative-concept texts (see experiments/kernel/probes.py)."""
    if probe.diffmean is None:
        raise ProbeError(
            f"the classifier for {probe.concept} has no diffmean vector; "
            "retrain it with `make classifiers`"
        )
    # Stored unit-norm; SteeringVector.from_direction normalises once more in float32.
    return _checked(probe.diffmean, f"the diffmean vector of {probe.concept}")


def project_out(vector: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """``vector`` minus its component along ``axis``, renormalised to unit length."""
    vector = np.asarray(vector, dtype=np.float64)
    unit = np.asarray(axis, dtype=np.float64)
    unit = unit / np.linalg.norm(unit)
    rest = vector - (vector @ unit) * unit
    checked = _checked(rest, "the direction without its format component")
    unit_rest: np.ndarray = checked / np.linalg.norm(rest)
    return unit_rest


@direction_source("classifier_deformat")
def probe_weight_deformat(probe: LinearProbe, ctx: DirectionContext) -> np.ndarray:
    """The probe's unit weight with the format axis projected out: whatever question-versus-
    statement component the probe still carries cannot steer the output's form."""
    if ctx.format_axis is None:
        raise ProbeError(
            f"vector_source classifier_deformat needs the format axis of the classifiers for "
            f"{probe.concept} (format_axis.json); retrain them with `make classifiers`"
        )
    axis = _checked(ctx.format_axis, "the format axis")
    return project_out(probe.direction(), axis)


@direction_source("file")
def imported_vector(probe: LinearProbe, ctx: DirectionContext) -> np.ndarray:
    """A vector someone else made (repeng, steering-vectors, AxBench, an SAE decoder),
    read and validated from ``steering.vector_file``: it steers at the run's own α·β,
    and its detection metrics are measured on the probe's test texts."""
    if ctx.imported is None or probe.concept not in ctx.imported:
        raise ProbeError(
            f"vector_source file has no vector for {probe.concept}; set steering.vector_file "
            "to a file or folder that has one"
        )
    # Passed on as read (float32): kernel/vectors.py keeps a vector that is already
    # unit-norm in float32 bit for bit, so a re-imported export steers exactly as its run.
    _checked(ctx.imported[probe.concept], f"the imported vector of {probe.concept}")
    return np.asarray(ctx.imported[probe.concept])
