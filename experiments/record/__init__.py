"""The versioned run record: the typed contract between a run and everything after it.

A finished Phase 5 run writes one :class:`RunRecord` (``steering_results.json`` in its
run folder and as an MLflow artefact). Human validation, the judge panel, rescoring and
the calibration study read runs through it, never through MLflow parameter strings.
``version`` changes whenever a field changes meaning; an older or newer record fails
with a message instead of being half-read.

Every phase's record and every typed block inside them live in this package, documented
field by field: ``phase5`` (:class:`RunRecord`), ``calibration`` (the classifier and
calibration records), ``identify`` (:class:`IdentifyRecord`), and what they share in
``base``. It is the one place a reader looks up what a record holds; import from it.
"""

from experiments.record.base import (
    RecordError,
    read_record,
)
from experiments.record.calibration import (
    CalibrationRecord,
    ClassifierRecord,
    CurveFit,
    CurveLevel,
    LayerProbes,
    MinimumEffective,
    MixedSlope,
)
from experiments.record.identified import (
    FamilySlopes,
    IdentifiedResult,
    IsoCos,
    IsoCosAngle,
    MatchedPairs,
    NameFreeDetection,
    OutcomeSlopes,
    SubsetAgreement,
    SubsetResult,
)
from experiments.record.identify import (
    Baseline,
    BetweenConcepts,
    Correction,
    CurveRow,
    EstimandResult,
    GeneratedCheck,
    Heterogeneity,
    IdentifyRecord,
    ManipulationResult,
    Mediation,
    MinimumLevel,
    MixedFit,
    Phase6Fit,
    Phase6Reanalysis,
    PooledResult,
    PredictorFit,
    PrimaryResult,
    PrimarySpec,
    PrimaryVerdict,
    RankRow,
)
from experiments.record.measurement import (
    DirectionFit,
    LikelihoodFamily,
    Measurement,
    ReferenceGapSummary,
)
from experiments.record.phase5 import (
    MIGRATABLE,
    RECORD_FORMAT,
    RECORD_VERSION,
    ArmEffect,
    CriterionInterval,
    CriterionRecord,
    Figure,
    LayerChoice,
    LayerRow,
    NullEffect,
    RunRecord,
    RunStatistics,
    SteeredIntervention,
    figure_number,
    predictor_values,
    steered_intervention,
)
from experiments.record.pooled import (
    ExploratoryRecord,
    FloorCheck,
    PooledRecord,
    PooledShard,
    PrimaryReading,
)

__all__ = [
    "MIGRATABLE",
    "RECORD_FORMAT",
    "RECORD_VERSION",
    "ArmEffect",
    "Baseline",
    "BetweenConcepts",
    "CalibrationRecord",
    "ClassifierRecord",
    "Correction",
    "CriterionInterval",
    "CriterionRecord",
    "CurveFit",
    "CurveLevel",
    "CurveRow",
    "DirectionFit",
    "EstimandResult",
    "ExploratoryRecord",
    "FamilySlopes",
    "Figure",
    "FloorCheck",
    "GeneratedCheck",
    "Heterogeneity",
    "IdentifiedResult",
    "IdentifyRecord",
    "IsoCos",
    "IsoCosAngle",
    "LayerChoice",
    "LayerProbes",
    "LayerRow",
    "LikelihoodFamily",
    "ManipulationResult",
    "MatchedPairs",
    "Measurement",
    "Mediation",
    "MinimumEffective",
    "MinimumLevel",
    "MixedFit",
    "MixedSlope",
    "NameFreeDetection",
    "NullEffect",
    "OutcomeSlopes",
    "Phase6Fit",
    "Phase6Reanalysis",
    "PooledRecord",
    "PooledResult",
    "PooledShard",
    "PredictorFit",
    "PrimaryReading",
    "PrimaryResult",
    "PrimarySpec",
    "PrimaryVerdict",
    "RankRow",
    "RecordError",
    "ReferenceGapSummary",
    "RunRecord",
    "RunStatistics",
    "SteeredIntervention",
    "SubsetAgreement",
    "SubsetResult",
    "figure_number",
    "predictor_values",
    "read_record",
    "steered_intervention",
]
