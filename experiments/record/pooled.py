"""The pooled held-out scoring's record, :class:`PooledRecord`: the pooled run's record,
and the type of ``pooled/pooled.json`` beside the committed shards (that file keeps the
layout ``identify pool`` always wrote; v3's and v4's read as this type)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Final, Literal

from pydantic import Field

from experiments.record.base import _Block
from experiments.record.identify import Correction, EstimandResult, PrimaryResult, PrimaryVerdict
from metrics.cluster import ClusterFit
from metrics.intervals import Interval

POOLED_FORMAT: Final = "steer-eval/identify-pooled"


class PooledShard(_Block):
    """One finished shard the pool read: its run, concepts and device."""

    shard: int
    run_id: str
    device: str
    forced: bool
    n_concepts: int


class PooledPrimary(PrimaryResult):
    """A primary as the pool reads it: ``uninformative`` where its rows miss the
    pre-registration's reliability floor, whatever its interval read (``read``)."""

    read: PrimaryVerdict | None = None


class PrimaryReading(_Block):
    """One co-primary as Holm's step-down left it (``estimation/multiplicity.Reading``):
    its verdict at the level it was read, and the step that settled it (0: never)."""

    name: str
    verdict: str
    confidence: float
    holm_step: int
    spec: dict[str, object]
    slope: ClusterFit
    correction: Correction | None = None  # a corrected equal-geometry slope's
    estimator: str
    manipulations: list[str] | None = None
    left_out: list[str] | None = None
    read: PrimaryVerdict | None = None  # an uninformative primary's interval reading


class FloorCheck(_Block):
    """The pre-registration's reliability floor beside the likelihood's split-half
    reliability on one primary's rows, pooled and per shard."""

    population: str
    pooled: Interval
    by_shard: dict[str, Interval] = Field(default_factory=dict)
    shards_without: list[int] = Field(default_factory=list)
    floor: float
    met: bool


class PooledRecord(_Block):
    """The pre-registered primary (and co-primaries) scored once on the pooled shards."""

    format: Literal["steer-eval/identify-pooled"] = POOLED_FORMAT
    version: int = 1
    experiment: str
    label: str = Field(description="confirmatory, or forced re-scoring")
    forced: bool
    preregistration: dict[str, object] = Field(description="path, sha256, primary, commit")
    binding: dict[str, str]
    shard_size: int | None
    shards: list[PooledShard]
    n_concepts: int
    devices: dict[str, int] = Field(description="concepts per device")
    concept_device: dict[str, str]
    primary: PooledPrimary
    primaries: list[PrimaryReading] | None = None  # with co-primaries, Holm's readings
    reliability_floor: dict[str, FloorCheck] | None = None  # per primary, where declared


class ScoredPrimary(_Block):
    """The pooled primary as it was scored, beside the exploratory estimands."""

    verdict: str
    slope: ClusterFit


class PerConceptSummary(_Block):
    """The concepts' own within-concept slopes and their built directions' AUROC spread."""

    concepts_with_slope: int
    positive_share: float
    slope_median: float
    auroc_sd_median: float


class FloorOutcome(_Block):
    """The primary's outcome reliability in the shards that keep it, beside the floor."""

    key: str  # the record's outcome_reliability key read
    floor: float
    shards: int  # shards keeping it
    min: float | None
    below_floor: list[str]  # shards below the floor


class ShardReliabilities(_Block):
    """Each shard's kept outcome reliabilities (``reliability.json``) by key and shard."""

    by_key: dict[str, dict[str, Interval]]
    shards_without: list[int]
    primary_outcome: FloorOutcome


@dataclass(frozen=True)
class Components:
    """The variance components measured on one run's equal-geometry rows
    (``identify/estimation/variance.components``; the design simulation draws from them)."""

    n_concepts: int
    rows_per_concept: float
    pooled_slope: float
    pooled_se: float
    slope_sd: float  # τ, between concepts (DerSimonian–Laird)
    within_sd: float  # residual sd inside a cell
    auroc_within_sd: float  # AUROC's sd inside a cell
    i2: float  # share of the slopes' spread that is between concepts
    # AUROC's reliability inside the cells (1 − its error variance over its spread), from
    # a run with split-half errors (``auroc_error_within``, identify.reference_halves)
    auroc_reliability: float | None = None

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class Refit:
    """The practitioner's slope on a named part of its rows, read by the pre-registered
    rule (for reading only: exploratory)."""

    name: str
    rows: str  # which rows, in words
    fit: ClusterFit
    verdict: str


@dataclass(frozen=True)
class Geometry:
    """The outcome within concept on AUROC beside its geometry (``column``, one of
    ``identify/estimation/families.GEOMETRY_COLUMNS``): R² (concept bootstrap) of the
    effect on AUROC, on the cosine and on both, and AUROC's slope beside the cosine."""

    column: str
    r2_auroc: Interval
    r2_cos: Interval
    r2_both: Interval
    slope_auroc_beside_cos: ClusterFit
    slope_cos: ClusterFit


@dataclass(frozen=True)
class FamilyDecomposition:
    """The primary taken apart by family of built directions
    (``identify/estimation/families.decompose``)."""

    numerator_share_by_family: dict[str, float]
    numerator_share_by_direction: dict[str, float]
    auroc_between_family_share: float  # of the within-concept AUROC variation
    family_means: dict[str, dict[str, float]]  # mean AUROC and effect per family
    refits: list[Refit]
    geometry: Geometry | None  # None where the run has no cos_half column


class ExploratoryRecord(_Block):
    """Every estimand on the pooled shards after the primary was scored (exploratory;
    ``identify/pooled_exploratory.py``), the practitioner's variance components, the
    shards' reliabilities and the primary taken apart by family."""

    label: str
    primary_scored: ScoredPrimary
    n_concepts: int
    estimands: dict[str, EstimandResult]
    components: Components
    per_concept: PerConceptSummary
    reliability: ShardReliabilities
    families: FamilyDecomposition
