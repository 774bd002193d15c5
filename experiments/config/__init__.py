"""Experiment configuration: YAML files under ``configs/``, validated at the edge.

Unknown keys, wrong types and impossible values fail with a message that names the
field and how to fix it. Any field can be overridden with ``--set a.b=value``.

A config per phase: :class:`RunConfig` holds what every phase shares, and one top model
per phase (:data:`PHASE_MODELS`) adds only its own section and says where its MLflow
experiment and results folder live (``config.experiment``, ``config.results_dir``). The
YAML names its phase (``phase:``); :func:`load_config` picks the model. How each field
enters :meth:`RunConfig.config_hash` is declared on the field (:class:`HashRule`).

One module per part, each saying what it holds (``base``, ``sections``, ``common``, one
per phase, ``load``), every name imported from here (``from experiments.config import X``).
"""

from experiments.config.base import (
    CPU_BATCH_ROWS,
    EXCLUDE,
    INCLUDE,
    OMIT_IF_DEFAULT,
    PHASE_CONFIGS,
    ConfigError,
    DeltaUnits,
    HashRule,
    Moved,
    Phase,
    Seed,
    hash_rule,
)
from experiments.config.calibration import CalibrationConfig, CalibrationStudyConfig
from experiments.config.common import PHASE_MODELS, RunConfig
from experiments.config.identify import (
    Degrees,
    Fraction,
    IdentifyConfig,
    IdentifyStudyConfig,
)
from experiments.config.load import (
    apply_overrides,
    did_you_mean,
    dump_config,
    load_config,
    merge_overlay,
    parse_override,
)
from experiments.config.phase5 import Phase5Config, Phase5TrackingConfig
from experiments.config.sections import (
    CentroidConfig,
    ClassifierConfig,
    ConceptsConfig,
    ControlsConfig,
    CriteriaConfig,
    EmbeddingConfig,
    ExecutionConfig,
    GateConfig,
    GenerationConfig,
    LikelihoodConfig,
    MetricsConfig,
    SelectionConfig,
    SteeringConfig,
    TrackingConfig,
)
from steering.probes import Predictor  # imported from here by callers that type criteria

__all__ = [
    "CPU_BATCH_ROWS",
    "EXCLUDE",
    "INCLUDE",
    "OMIT_IF_DEFAULT",
    "PHASE_CONFIGS",
    "PHASE_MODELS",
    "CalibrationConfig",
    "CalibrationStudyConfig",
    "CentroidConfig",
    "ClassifierConfig",
    "ConceptsConfig",
    "ConfigError",
    "ControlsConfig",
    "CriteriaConfig",
    "Degrees",
    "DeltaUnits",
    "EmbeddingConfig",
    "ExecutionConfig",
    "Fraction",
    "GateConfig",
    "GenerationConfig",
    "HashRule",
    "IdentifyConfig",
    "IdentifyStudyConfig",
    "LikelihoodConfig",
    "MetricsConfig",
    "Moved",
    "Phase",
    "Phase5Config",
    "Phase5TrackingConfig",
    "Predictor",
    "RunConfig",
    "Seed",
    "SelectionConfig",
    "SteeringConfig",
    "TrackingConfig",
    "apply_overrides",
    "did_you_mean",
    "dump_config",
    "hash_rule",
    "load_config",
    "merge_overlay",
    "parse_override",
]
