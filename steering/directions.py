"""Direction sources: how a concept's probe becomes a steering direction.

A source is a plain callable ``(probe, context) -> unit direction`` registered under
the name that ``steering.vector_source`` selects, in the spirit of steering-vectors'
aggregators: a new way to pick a direction is a new function here, not a new branch
in the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from steering.probes import LinearProbe, ProbeError


@dataclass(frozen=True)
class DirectionContext:
    """What a source may use besides the probe (e.g. a nuisance axis to project out)."""

    format_axis: np.ndarray | None = None


DirectionSource = Callable[[LinearProbe, DirectionContext], np.ndarray]
_SOURCES: dict[str, DirectionSource] = {}


def direction_source(name: str) -> Callable[[DirectionSource], DirectionSource]:
    """Register a direction source under ``name``."""

    def register(func: DirectionSource) -> DirectionSource:
        _SOURCES[name] = func
        return func

    return register


def get_direction_source(name: str) -> DirectionSource:
    try:
        return _SOURCES[name]
    except KeyError:
        raise ProbeError(
            f"unknown steering.vector_source {name!r}; use one of {sorted(_SOURCES)}"
        ) from None


def direction_source_names() -> list[str]:
    return sorted(_SOURCES)


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
    """The unit difference of class means on the probe's own training set."""
    if probe.diffmean is None:
        raise ProbeError(
            f"the classifier for {probe.concept} has no diffmean vector; "
            "retrain it with `make classifiers`"
        )
    # Stored unit-norm; SteeringVector.from_direction normalises once more in float32.
    return _checked(probe.diffmean, f"the diffmean vector of {probe.concept}")
