"""Experiment configuration: YAML files under ``configs/``, validated at the edge.

Unknown keys, wrong types and impossible values fail with a message that names the
field and how to fix it. Any field can be overridden with ``--set a.b=value``.

The module is longer than 500 lines because every section's schema sits here (Phase 4
to 6 and the identification study), each field with its range and description: one
place to read what a config may say.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from steering.directions import direction_source_names
from steering.probes import TrainSpec

# Per-concept detection quality that criterion 3 correlates with steering magnitude.
# (the same names as steering.probes.PREDICTORS; a test keeps the two in step).
Predictor = Literal["f1_calibrated", "f1_raw", "auroc", "ap"]


# The seeds of torch.Generator and numpy: non-negative integers (a negative one passed
# validation, then crashed after the model had loaded).
Seed = Annotated[int, Field(ge=0, lt=2**63)]
# Δ is a difference of two cosines, so thresholds and effects in Δ units lie in [0, 2].
DeltaUnits = Annotated[float, Field(ge=0, le=2)]
# Rows per decode batch on the CPU (the default, and what generation.batch_size auto means
# there); scoring embeds in chunks of this many rows when the batch size is auto.
CPU_BATCH_ROWS = 96


class ConfigError(ValueError):
    """The configuration is unreadable or invalid; the message names the field and fix."""


class _Strict(BaseModel):
    # Every float must be finite: an infinite β once finished a run whose every steered
    # text was " p p p …", with criteria decided.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ConceptsConfig(_Strict):
    file: str = "data/concepts/wordnet_top10.json"
    limit: int | None = Field(None, ge=1, description="use only the first N concepts")
    synsets: list[str] | None = Field(None, description="use only these synset ids")


class ClassifierConfig(_Strict):
    train: str = "1x1x1"
    eval_per_class: int = Field(
        20,
        ge=2,
        description="held-out positives per split (validation and test); each split has as "
        "many negatives, half negative concepts and half neutral texts",
    )
    c: float = Field(1.0, gt=0, description="inverse L2 regularisation of the probe")
    dir: str = "results/classifiers"
    auto_train: bool = Field(
        True, description="train missing classifiers in `run`; false makes them an error"
    )

    @field_validator("train")
    @classmethod
    def _train(cls, value: str) -> str:
        _check_train_size(value)
        return value


def _check_train_size(text: str) -> None:
    """A training size the template pool can fill, checked before any work starts."""
    from experiments.prompts import max_train_texts

    spec = TrainSpec.parse(text)
    most = max_train_texts()
    if max(spec.n_pos, spec.n_neg, spec.n_neutral) > most:
        raise ValueError(
            f"{text!r} asks for more than {most} training texts per class, but the train "
            f"template pool has {most} templates (one text per template keeps the classes "
            f"format-matched without repeating a text); use at most {most}x{most}x{most}"
        )


class SteeringConfig(_Strict):
    mode: Literal["additive", "projection"] = "additive"
    beta: float = Field(
        0.2, gt=0, description="strength 1.0 adds beta × the median residual norm (finite)"
    )
    vector_source: str = Field(
        "classifier",
        description="a registered direction source (steering/directions.py): classifier, "
        "diffmean, classifier_deformat, ...",
    )
    strengths: list[float] = Field(default_factory=lambda: [-1.0, 0.0, 1.0], min_length=2)

    @field_validator("vector_source")
    @classmethod
    def _vector_source(cls, value: str) -> str:
        names = direction_source_names()
        if value not in names:
            raise ValueError(f"unknown direction source {value!r}; use one of {names}")
        return value

    @field_validator("strengths")
    @classmethod
    def _strengths(cls, value: list[float]) -> list[float]:
        if 0.0 not in value:
            raise ValueError(
                "must include 0.0: the unsteered baseline is needed to measure Δ_s − Δ_0 "
                "(for example [-1.0, 0.0, 1.0])"
            )
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a strength")
        return sorted(value)


class ControlsConfig(_Strict):
    """Null controls and baselines generated beside the concept directions."""

    random_directions: int = Field(
        1, ge=0, description="random unit directions per concept, at the same α·β (the null)"
    )
    prompt_baseline: bool = Field(
        False, description="also steer by instruction instead of a vector (the prompting baseline)"
    )
    prompt_positive: str = Field(
        "Write about {concept}. ", description="prefix for the prompting baseline at s > 0"
    )
    prompt_negative: str = Field(
        "Write about anything except {concept}. ",
        description="prefix for the prompting baseline at s < 0",
    )

    @field_validator("prompt_positive", "prompt_negative")
    @classmethod
    def _has_concept(cls, value: str) -> str:
        if "{concept}" not in value:
            raise ValueError("must contain {concept}, which is replaced by the concept's name")
        return value


class SelectionConfig(_Strict):
    """Held-out strength selection: β per concept chosen on half the prompts."""

    mode: Literal["none", "heldout"] = Field(
        "none", description="none: one β for all; heldout: β per concept on selection prompts"
    )
    beta_grid: list[float] = Field(default_factory=lambda: [0.1, 0.2, 0.3], min_length=1)
    selection_prompts: float = Field(
        0.5, gt=0, lt=1, description="fraction of each concept's prompts used to choose β"
    )

    @field_validator("beta_grid")
    @classmethod
    def _grid(cls, value: list[float]) -> list[float]:
        if any(b <= 0 for b in value):
            raise ValueError("every β must be > 0 (for example [0.1, 0.2, 0.3])")
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a β")
        return sorted(value)


class GateConfig(_Strict):
    """The coherence gate: a steered text that fails it counts as no effect."""

    perplexity_multiple: float = Field(
        20.0,
        gt=1,
        description="fail above this multiple of the concept's s = 0 median perplexity "
        "(the β sweep puts coherent steering at 3-13x and collapse at 30x and more: "
        "docs/findings.md, 'How the default β = 0.2 was chosen')",
    )
    effect_reference: float = Field(
        0.3, gt=0, le=2, description="a signed effect of this size scores 1 in the combined score"
    )


class LikelihoodConfig(_Strict):
    """The likelihood outcome: how a direction moves the model's log-likelihood of fixed
    on-concept texts against off-concept ones (teacher-forced, no sampling)."""

    enabled: bool = Field(
        False, description="score every direction by the likelihood outcome beside Δ"
    )
    texts: int = Field(10, ge=2, description="on-concept texts per concept (each paired)")
    prefix: str = Field("Here is a text:", description="what the texts are scored after")
    neutral_nulls: int = Field(
        2, ge=0, description="null directions per concept: diffmeans of neutral-text splits"
    )
    other_nulls: int = Field(
        2, ge=0, description="null directions per concept: other concepts' directions"
    )
    batch_size: int = Field(64, ge=1, description="sequences per forward pass")


class GenerationConfig(_Strict):
    prompts: list[str] = Field(
        default_factory=lambda: [
            "Tell me about {concept}.",
            "Tell me about something.",
            "Here is a story:",
        ],
        min_length=1,
    )
    suppression_prompts: list[str] | None = Field(
        None,
        description="prompts that name the concept ({concept}), used for s < 0 only; the "
        "prompts above then serve s > 0 only. Suppression can only show where the concept "
        "is there to suppress (AxBench scores it so); null = every strength on every prompt",
    )
    max_new_tokens: int = Field(50, ge=1, le=4096)
    temperature: float = Field(1.0, gt=0, description="sampling temperature (finite, > 0)")
    top_p: float = Field(0.95, gt=0, le=1)
    greedy: bool = False
    samples_per_prompt: int = Field(1, ge=1)
    batch_size: int | Literal["auto"] = Field(
        CPU_BATCH_ROWS,
        description="rows per forward pass; auto: 96 on the CPU, on CUDA what the card's "
        "free memory holds (up to 1,024)",
    )

    @field_validator("batch_size")
    @classmethod
    def _batch_size(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise ValueError("must be at least 1, or auto")
        return value


class EmbeddingConfig(_Strict):
    model: str = "embedded"


class CentroidConfig(_Strict):
    texts_per_centroid: int = Field(5, ge=1)


class MetricsConfig(_Strict):
    delta_threshold: DeltaUnits = 0.15
    echo_threshold: float = Field(0.5, gt=0, le=1)


class CriteriaConfig(_Strict):
    direction_min_fraction: float = Field(0.8, ge=0, le=1)
    magnitude_min: DeltaUnits = 0.15
    magnitude_at: float = 1.0
    f1_r_min: float = Field(0.5, ge=-1, le=1)
    predictor: Predictor = Field(
        "f1_calibrated",
        description="the classifier quality criterion 3 correlates with steering: F1 at a "
        "validation-chosen threshold, F1 at the fitted decision (> 0), AUROC or AP",
    )
    human_r_pass: float = Field(0.7, ge=-1, le=1)
    human_r_panel: float = Field(0.5, ge=-1, le=1)
    panel_alpha_min: float = Field(0.667, ge=-1, le=1)
    panel_r_min: float = Field(0.7, ge=-1, le=1)
    effect_min: float = Field(
        0.15, ge=0, le=2, description="v2: the effect above null must exceed this (Δ units)"
    )
    specificity_min: float = Field(
        0.0,
        ge=0,
        le=2,
        description="v2: the specificity margin (own concept's gain minus the others') "
        "must exceed this (Δ units): its interval above 0 by default",
    )
    reliability_splits: int = Field(
        100, ge=1, description="random split-halves averaged per reliability (Spearman–Brown)"
    )
    confidence: float = Field(0.95, gt=0.5, lt=1, description="v2: interval level")
    n_boot: int = Field(2000, ge=100, description="v2: bootstrap replicates")


class CalibrationConfig(_Strict):
    """Phase 6: probes along a training curve, their detection quality and their steering."""

    sizes: list[str] = Field(
        # The largest size is the train template pool (16): 20x20x20 would repeat texts.
        default_factory=lambda: ["1x1x1", "2x2x2", "5x5x5", "10x10x10", "16x16x16"],
        min_length=1,
    )
    sources: list[str] = Field(default_factory=lambda: ["classifier", "diffmean"], min_length=1)
    probe_seeds: list[Seed] = Field(default_factory=lambda: [0, 1], min_length=1)
    layers: list[int] | None = Field(None, description="null = the steering layer only")
    predictors: list[str] = Field(
        default_factory=lambda: [
            "f1_calibrated",
            "auroc",
            "ap",
            "f1_raw",
            "cos_probe_diffmean",
            "train_separation",
        ],
        min_length=1,
    )
    effect_threshold: float = Field(
        0.05,
        ge=0,
        le=2,
        description="effective: the effect above null has its interval above this",
    )
    experiment: str = "phase6-calibration"
    results_dir: str = "results/phase6"

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[str]) -> list[str]:
        for text in value:
            _check_train_size(text)
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a training size")
        return value


Degrees = Annotated[float, Field(ge=0, le=90)]
Fraction = Annotated[float, Field(ge=0, lt=0.5)]


class IdentifyConfig(_Strict):
    """Phase 6 that identifies (``steer-eval identify``): detection quality varied on its
    own around a reference direction, each direction scored as a detector and by how it
    steers (the likelihood outcome on every direction, generations on a subset)."""

    concept_set: Literal["development", "heldout"] = Field(
        "development",
        description="which half of the concept file to run: development (exploratory) or "
        "heldout (scored once per pre-registration; `steer-eval identify --heldout`)",
    )
    heldout_fraction: float = Field(0.5, gt=0, lt=1, description="share of concepts held out")
    split_seed: Seed = Field(0, description="seeds the development / held-out split")
    limit: int | None = Field(None, ge=2, description="only the first N concepts of the set")
    reference_size: str = Field(
        "16x16x16",
        description="v*: the diffmean direction at this training size (the largest the "
        "train template pool holds), from training texts disjoint from the test split",
    )
    theta_degrees: list[Degrees] = Field(
        default_factory=lambda: [0.0, 22.5, 45.0, 67.5, 90.0],
        min_length=2,
        description="rotation grid: v = cos θ·v* + sin θ·u, u ⟂ v*",
    )
    nuisances: list[Literal["isotropic", "pc", "other"]] = Field(
        default_factory=lambda: ["isotropic", "pc", "other"],
        min_length=1,
        description="families of u: isotropic random; the top principal components of "
        "neutral-text activations; other concepts' reference directions",
    )
    pc_components: int = Field(
        3, ge=1, description="u of the pc family lies in the span of this many top PCs"
    )
    label_noise: list[Fraction] = Field(
        default_factory=lambda: [0.0, 0.1, 0.2, 0.3, 0.4],
        min_length=1,
        description="fractions of positive labels swapped with a same-template negative",
    )
    noise_seeds: list[Seed] = Field(default_factory=lambda: [0, 1], min_length=1)
    logistic_c: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=lambda: [0.001, 0.01, 0.1, 1.0],
        description="the logistic probe's regularisation path (at the reference size)",
    )
    shrinkage: list[Annotated[float, Field(gt=0, le=1)]] = Field(
        default_factory=lambda: [1.0, 0.3, 0.1, 0.03, 0.01],
        description="λ of (λ·σ̄²·I + (1−λ)·Σ)⁻¹·Δμ: 1 is diffmean, toward 0 the whitened "
        "direction Σ⁻¹Δμ",
    )
    sizes: list[str] = Field(
        default_factory=lambda: ["1x1x1", "2x2x2", "5x5x5", "16x16x16"],
        description="the training curve re-measured on the likelihood outcome (diffmean)",
    )
    null_draws: int = Field(
        2,
        ge=0,
        description="extra isotropic random directions per concept; with rotation:isotropic:90 "
        "they are the concept's null",
    )
    texts_per_concept: int = Field(10, ge=2, description="likelihood text pairs per concept")
    prefix: str = Field("Here is a text:", description="what each likelihood text follows")
    strengths: list[float] = Field(
        default_factory=lambda: [1.0],
        min_length=1,
        description="signed strengths of the likelihood outcome (0 is the reference)",
    )
    lens_positions: int = Field(
        16, ge=2, description="neutral-text positions the logit-lens score averages over"
    )
    generated: list[str] = Field(
        default_factory=lambda: [
            "rotation:isotropic:0",
            "rotation:isotropic:45",
            "rotation:isotropic:90",
            "rotation:pc:45",
            "noise:0.4:0",
            "shrinkage:0.01",
        ],
        description="directions (ids) also generated from and scored by Δ, to validate the "
        "likelihood outcome",
    )
    targets: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=lambda: [0.5, 1.0],
        description="minimum effective AUROC: where the effect reaches these fractions of "
        "the prompting baseline's",
    )
    preregistration: str = Field(
        "docs/preregistration-identify.md",
        description="the committed pre-registration (hypotheses, the one primary analysis)",
    )
    phase6_run: str | None = Field(
        None,
        description="a Phase 6 calibration run (id or folder) whose training curve is "
        "re-analysed from its saved generations and probes",
    )
    batch_size: int = Field(64, ge=1, description="sequences per likelihood forward pass")
    experiment: str = "phase6-identify"
    results_dir: str = "results/identify"

    @field_validator("reference_size")
    @classmethod
    def _reference(cls, value: str) -> str:
        _check_train_size(value)
        return value

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[str]) -> list[str]:
        for text in value:
            _check_train_size(text)
        return value

    @field_validator("theta_degrees", "label_noise", "logistic_c", "shrinkage")
    @classmethod
    def _distinct(cls, value: list[float]) -> list[float]:
        if len(set(value)) != len(value):
            raise ValueError("must not repeat a value")
        return value

    @field_validator("strengths")
    @classmethod
    def _signed(cls, value: list[float]) -> list[float]:
        if 0.0 in value or len(set(value)) != len(value):
            raise ValueError("non-zero, distinct strengths (0 is the reference), e.g. [1.0]")
        return value


class TrackingConfig(_Strict):
    experiment: str = "phase5-semantic-steering"
    classifier_experiment: str = "phase4-classifiers"
    results_dir: str = "results/phase5"
    traces: bool = Field(
        True,
        description="one MLflow trace per generation with its scores as feedback (about "
        "0.1 s each on sqlite; false for grids of many thousands)",
    )
    evaluation: bool = Field(
        True,
        description="with traces: the run's steered generations also in MLflow's GenAI "
        "evaluation views (a child evaluation run, code scorers reading the saved scores; "
        "no model calls; about 0.1 s per generation on sqlite)",
    )
    child_runs: Literal["per_cell", "per_concept", "none"] = Field(
        "per_cell",
        description=(
            "MLflow child runs: one per concept × strength (per_cell), one per concept "
            "(per_concept) or none; per-cell results are always in the parent's cells.json"
        ),
    )


class ExecutionConfig(_Strict):
    """Where the generation stage runs. Not in the hash: on one machine a Ray run gives the
    local run's numbers bit for bit, because its actors use the driver's torch thread count
    (fp32 CPU attention over the KV cache depends on it: docs/scale-out.md)."""

    executor: Literal["local", "ray"] = Field(
        "local", description="local: this process; ray: an actor pool (RAY_ADDRESS to join)"
    )
    workers: int = Field(2, ge=1, description="ray: actors, each loading the model once")
    cpus_per_worker: float = Field(
        1.0, gt=0, description="ray: CPUs reserved per actor (a scheduling resource)"
    )
    torch_threads: int | None = Field(
        None,
        ge=1,
        description="ray: torch threads per actor; null = the driver's own count, so a run "
        "gives the local run's numbers (another count changes NLLs in the last bits)",
    )
    max_retries: int = Field(
        2, ge=0, description="ray: re-runs of a batch whose worker died before it finished"
    )


# Config keys that say where results are written or cached, and where work runs: none of
# them changes a number, so the config hash leaves them out.
HASH_EXCLUDED = (
    "execution",
    "tracking.results_dir",
    "tracking.evaluation",
    "classifier.dir",
    "calibration.results_dir",
    "identify.results_dir",
)


class ExperimentConfig(_Strict):
    """The whole Phase 4 + Phase 5 setup; ``configs/phase5.yaml`` holds the seed's values."""

    name: str = "phase5"
    seed: Seed = 0
    model: str = "embedded"
    model_load_format: Literal["auto", "dummy"] = Field(
        "auto",
        description="auto: the model's weights; dummy: its config with random weights "
        "(seeded; timing and smoke runs without weights, like vLLM's load_format=dummy). "
        "model then names a config: a shipped one (gemma-3-4b-pt), a .json or a folder",
    )
    device: str = "auto"
    dtype: str = "auto"
    layer: int | None = Field(None, description="decoder layer; null = the middle layer")

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value not in ("auto", "cpu") and not value.startswith(("cuda", "mps")):
            raise ValueError(f"device {value!r} is not auto, cpu, cuda or cuda:N")
        return value

    concepts: ConceptsConfig = Field(default_factory=ConceptsConfig)
    classifier: ClassifierConfig = Field(default_factory=ClassifierConfig)
    steering: SteeringConfig = Field(default_factory=SteeringConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    controls: ControlsConfig = Field(default_factory=ControlsConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    likelihood: LikelihoodConfig = Field(default_factory=LikelihoodConfig)
    calibration: CalibrationConfig = Field(default_factory=CalibrationConfig)
    identify: IdentifyConfig = Field(default_factory=IdentifyConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    centroids: CentroidConfig = Field(default_factory=CentroidConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    criteria: CriteriaConfig = Field(default_factory=CriteriaConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)

    @model_validator(mode="after")
    def _suppression_prompts_name_the_concept(self) -> ExperimentConfig:
        prompts = self.generation.suppression_prompts
        if prompts is not None and any("{concept}" not in p for p in prompts):
            raise ValueError(
                "generation.suppression_prompts must each name the concept ({concept}): "
                "s < 0 is scored where there is a concept to suppress"
            )
        if prompts is not None and len(prompts) < 1:
            raise ValueError("generation.suppression_prompts: give at least one, or null")
        return self

    @model_validator(mode="after")
    def _heldout_needs_prompts(self) -> ExperimentConfig:
        if self.selection.mode == "heldout" and len(self.generation.prompts) < 2:
            raise ValueError(
                "selection.mode heldout splits each concept's prompts into a selection and "
                "a report half: give generation.prompts at least 2 prompts (6 or more for "
                "a study), or set selection.mode: none"
            )
        return self

    def config_hash(self) -> str:
        """A short hash of the resolved config, to tell runs' settings apart at a glance.
        Left out: ``execution`` (a local and a Ray run of one config give the same numbers)
        and the folders a run writes to or caches in (:data:`HASH_EXCLUDED`), which
        change where results land, not what they are."""
        data = self.model_dump(mode="json")
        for path in HASH_EXCLUDED:
            node = data
            *parents, leaf = path.split(".")
            for part in parents:
                node = node[part]
            node.pop(leaf)
        if data["model_load_format"] == "auto":  # the field's default: older runs' hashes hold
            del data["model_load_format"]
        default_identify = IdentifyConfig().model_dump(mode="json")
        default_identify.pop("results_dir")
        if data["identify"] == default_identify:  # likewise: runs before the section hold
            del data["identify"]
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def flat(self) -> dict[str, Any]:
        """Dotted keys to values, for MLflow params."""
        out: dict[str, Any] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for key, sub in value.items():
                    walk(f"{prefix}.{key}" if prefix else key, sub)
            else:
                out[prefix] = value

        walk("", self.model_dump(mode="json"))
        return out


def _format_errors(exc: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key; check its spelling against configs/phase5.yaml"
        elif err["type"].endswith("_type") or err["type"].endswith("_parsing"):
            msg = f"{msg} (got {err.get('input')!r})"
        lines.append(f"  - {field}: {msg}")
    return "\n".join(lines)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``generation.max_new_tokens=20`` -> (["generation", "max_new_tokens"], 20)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like key.path=value")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({exc})") from exc
    return path, value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {text!r}: {part} is not a section")
            node = nxt
        node[path[-1]] = value
    return data


def load_config(
    path: str | Path | None = None, overrides: list[str] | None = None
) -> ExperimentConfig:
    """Read a YAML config (or the defaults), apply overrides, validate."""
    source = str(path) if path else "(defaults)"
    data: dict = {}
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config {path} is not valid YAML: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(
                f"config {path} must be a mapping of sections, got {type(data).__name__}"
            )
    data = apply_overrides(data, overrides or [])
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source)) from None


def dump_config(config: ExperimentConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
