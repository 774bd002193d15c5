"""The manipulations of detection quality, registered like direction sources.

A manipulation is one function decorated ``@manipulation(name, levels=..., reference=...)``
that makes a concept's direction for one of its specs (:class:`ConceptInputs` holds what
every builder may use). The decorator names the family, the ``IdentifyConfig`` field that
holds its levels and the level at which it reproduces v* (listed once, as the reference);
the grid (:func:`direction_grid`), the builder (``data.build_directions``), the tables
(``cells.StudyTables``: curves, pooled rows, nulls), the analysis, the figures and the
validation ids (``crosscheck.canonical``) read this registry, never a family's name.

A spec's id is ``name[:sub]:level[:seed]``: ``within`` names the field whose entries are
sub-families (rotation's nuisances: ``rotation:pc`` is then the table's manipulation),
``seeds`` the field of seeds drawn at every level (label noise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from experiments.identify.stages.directions import (
    REFERENCE,
    DirectionSpec,
    TrainingSet,
    concept_diffmean,
    isotropic_nuisance,
    logistic_direction,
    rotate,
    shrinkage_direction,
    swap_labels,
)
from steering.probes import TrainSpec
from steering.registry import Registry, origin_of

if TYPE_CHECKING:
    from experiments.config import IdentifyConfig


@dataclass
class ConceptInputs:
    """What a concept's builders may use: v*, its training set, the nuisance directions,
    the within-class covariance and mean difference the shrinkage path whitens."""

    concept: str
    seed: int
    v_star: np.ndarray
    train: TrainingSet
    nuisance: dict[str, np.ndarray]  # family -> unit direction (isotropic, pc, other)
    other_name: str | None
    sigma: np.ndarray
    delta: np.ndarray
    graded: list[np.ndarray] = field(default_factory=list)  # iso-cos nuisances, ⟂ v*
    bands: list[int] = field(default_factory=list)  # random draws (v3): each one's band


# A builder: the direction of ``spec`` for one concept and the facts worth a column
# (e.g. the actual ρ), or None when the concept cannot have it.
Built = tuple[np.ndarray, Mapping[str, object]]
Builder = Callable[[DirectionSpec, ConceptInputs], Built | None]


@dataclass(frozen=True)
class Manipulation:
    name: str
    levels: str  # the IdentifyConfig field of its levels
    reference: float | str | None  # the level value that is v*, or the field holding it
    build: Builder
    level: Callable[[Any], float] = float  # a level value -> the table's numeric level
    within: str | None = None  # the IdentifyConfig field of its sub-families
    seeds: str | None = None  # the IdentifyConfig field of the seeds drawn per level
    specs: Callable[[Manipulation, IdentifyConfig], list[DirectionSpec]] | None = None
    control: bool = False  # a null, not a manipulation: no curve, not pooled
    # The mixed model splits AUROC within/between concepts and adjusts for log(level)
    # (analysis.py); summary.py then reports its within-concept term.
    log_level_covariate: bool = False

    def reference_value(self, ident: IdentifyConfig | None) -> Any:
        if isinstance(self.reference, str):
            return None if ident is None else getattr(ident, self.reference)
        return self.reference

    def reference_level(self, ident: IdentifyConfig | None) -> float | None:
        """The table's level at which this manipulation's curve passes through v*."""
        value = self.reference_value(ident)
        return None if value is None else float(self.level(value))

    def grid(self, ident: IdentifyConfig) -> list[DirectionSpec]:
        """Its specs: every level but the reference, per sub-family and seed."""
        if self.specs is not None:
            return self.specs(self, ident)
        ref = self.reference_value(ident)
        subs = getattr(ident, self.within) if self.within else [None]
        seeds = getattr(ident, self.seeds) if self.seeds else [None]
        out = []
        for sub in subs:
            axis = self.name if sub is None else f"{self.name}:{sub}"
            for value in getattr(ident, self.levels):
                if ref is not None and value == ref:
                    continue
                text = value if isinstance(value, str) else f"{value:g}"
                detail = value if isinstance(value, str) else repr(float(value))
                level = float(self.level(value))
                for s in seeds:
                    tail = "" if s is None else f":{s}"
                    out.append(DirectionSpec(f"{axis}:{text}{tail}", axis, level, s, detail))
        return out

    def reproduces_reference(self, direction: str) -> bool:
        """Whether an id (e.g. one of ``identify.generated``) names v*: its level is the
        reference. Only for a reference that does not depend on the config."""
        if self.reference is None or isinstance(self.reference, str):
            return False
        parts = direction.split(":")
        return float(parts[2 if self.within else 1]) == float(self.reference)


# Registration order is the grid's order.
MANIPULATIONS: Registry[Manipulation] = Registry("manipulation")


def manipulation(
    name: str,
    *,
    levels: str,
    reference: float | str | None = None,
    level: Callable[[Any], float] = float,
    within: str | None = None,
    seeds: str | None = None,
    specs: Callable[[Manipulation, IdentifyConfig], list[DirectionSpec]] | None = None,
    control: bool = False,
    log_level_covariate: bool = False,
) -> Callable[[Builder], Builder]:
    """Register a manipulation family ``name`` whose levels are ``IdentifyConfig.<levels>``
    and whose curve passes through v* at ``reference`` (a level value, the name of the
    field holding it, or None: it does not). Registration order is the grid's order."""

    def register(build: Builder) -> Builder:
        MANIPULATIONS.register(name, Manipulation(
            name, levels, reference, build, level, within, seeds, specs, control,
            log_level_covariate,
        ), origin=origin_of(build))  # fmt: skip
        return build

    return register


def family(manipulation_or_id: str) -> Manipulation | None:
    """The family of a table's manipulation (``rotation:pc``) or of a direction id."""
    return cast("Manipulation | None", MANIPULATIONS.get(manipulation_or_id.split(":", 1)[0]))


def is_control(manipulation_or_id: str) -> bool:
    m = family(manipulation_or_id)
    return m is not None and m.control


def reference_level(manipulation: str, ident: IdentifyConfig | None) -> float | None:
    """The level at which a manipulation's curve passes through v* (None: it does not)."""
    m = family(manipulation)
    return None if m is None else m.reference_level(ident)


def direction_grid(ident: IdentifyConfig) -> list[DirectionSpec]:
    """Every direction a concept gets, reference first. Levels that reproduce v* (θ = 0,
    ρ = 0, λ = 1, the reference size) are the reference itself, listed once; each
    manipulation's curve includes it (``StudyTables.curve``)."""
    out = [DirectionSpec(REFERENCE, REFERENCE, 0.0)]
    for m in MANIPULATIONS.values():
        out += m.grid(ident)
    return out


def build_direction(spec: DirectionSpec, inputs: ConceptInputs) -> Built | None:
    if spec.manipulation == REFERENCE:
        return inputs.v_star, {}
    m = family(spec.manipulation)
    if m is None:
        raise ValueError(f"no manipulation is registered for {spec.id!r}")
    return m.build(spec, inputs)


def n_train(size: str) -> int:
    return sum(int(x) for x in size.lower().split("x"))


@manipulation("rotation", levels="theta_degrees", reference=0.0, within="nuisances")
def _rotation(spec: DirectionSpec, inputs: ConceptInputs) -> Built | None:
    """v_θ = cos θ·v* + sin θ·u, u from the nuisance family (``other``: needs 2 concepts)."""
    name = spec.manipulation.split(":", 1)[1]
    if name not in inputs.nuisance:
        return None
    facts = {"other": inputs.other_name} if name == "other" else {}
    return rotate(inputs.v_star, inputs.nuisance[name], spec.level), facts


@manipulation("noise", levels="label_noise", reference=0.0, seeds="noise_seeds")
def _label_noise(spec: DirectionSpec, inputs: ConceptInputs) -> Built:
    """The diffmean with a fraction ρ of the positives' labels swapped within templates."""
    train = inputs.train
    labels, swapped = swap_labels(train, spec.level, int(spec.seed or 0), inputs.concept)
    n_pos = int((np.array(train.kinds) == "positive").sum())
    return concept_diffmean(train, labels), {"swapped": swapped, "rho_actual": swapped / n_pos}


@manipulation("logistic", levels="logistic_c", level=np.log10)
def _logistic(spec: DirectionSpec, inputs: ConceptInputs) -> Built:
    """The logistic probe at regularisation C (its level is log10 C), refitted on v*'s
    contrast: positives against the negative-concept texts, neutral texts left out (the
    suite's own probes also see neutrals as negatives; here that would change the contrast
    along with detection)."""
    train = inputs.train
    keep = np.array([k != "neutral" for k in train.kinds])
    direction = logistic_direction(
        train.features[keep], train.labels[keep], float(spec.detail), inputs.seed
    )
    return direction, {}


@manipulation("shrinkage", levels="shrinkage", reference=1.0)
def _shrinkage(spec: DirectionSpec, inputs: ConceptInputs) -> Built:
    """(λ·σ̄²·I + (1−λ)·Σ)⁻¹·Δμ: diffmean at λ = 1, the whitened direction toward 0."""
    return shrinkage_direction(inputs.delta, inputs.sigma, spec.level), {}


@manipulation(
    "size", levels="sizes", reference="reference_size", level=n_train, log_level_covariate=True
)
def _size(spec: DirectionSpec, inputs: ConceptInputs) -> Built:
    """The diffmean of a smaller training set (its level is the number of texts)."""
    size = TrainSpec.parse(spec.detail)
    return concept_diffmean(inputs.train.prefix(size.n_pos, size.n_neg, size.n_neutral)), {}


@manipulation("isocos", levels="isocos_degrees", reference=0.0, seeds="isocos_nuisances")
def _iso_cos(spec: DirectionSpec, inputs: ConceptInputs) -> Built | None:
    """cos θ·v* + sin θ·u_k for the k-th iso-cos nuisance (its seed; graded, or a random
    draw with its spectrum band, ``identify.isocos_draw``): at one angle, AUROC
    varies with the nuisance while cos(v, v*) = cos θ exactly; at 90° the nuisance alone,
    whose effect is the covariate of the nuisance's rows (estimator.iso_cos)."""
    k = int(spec.seed or 0)
    if k >= len(inputs.graded):
        return None
    facts = {"nuisance_band": inputs.bands[k]} if inputs.bands else {"nuisance_rank": k}
    return rotate(inputs.v_star, inputs.graded[k], spec.level), facts


def _null_specs(m: Manipulation, ident: IdentifyConfig) -> list[DirectionSpec]:
    return [DirectionSpec(f"null:{j}", "null", 0.0, seed=j) for j in range(ident.null_draws)]


@manipulation("null", levels="null_draws", specs=_null_specs, control=True)
def _null(spec: DirectionSpec, inputs: ConceptInputs) -> Built:
    """An isotropic random direction: the concept's null (with ``rotation:isotropic:90``)."""
    hidden = len(inputs.v_star)
    draw = 1 + int(spec.seed or 0)
    return isotropic_nuisance(hidden, inputs.seed, inputs.concept, draw=draw), {}
