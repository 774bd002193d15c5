"""Experiment configuration: YAML files under ``configs/``, validated at the edge.

Unknown keys, wrong types and impossible values fail with a message that names the
field and how to fix it. Any field can be overridden with ``--set a.b=value``.

A config per phase: :class:`RunConfig` holds what every phase shares, and one top model
per phase (:data:`PHASE_MODELS`) adds only its own section and says where its MLflow
experiment and results folder live (``config.experiment``, ``config.results_dir``). The
YAML names its phase (``phase:``); :func:`load_config` picks the model. How each field
enters :meth:`RunConfig.config_hash` is declared on the field (:class:`HashRule`).

The module is longer than 500 lines because every section's schema sits here (Phase 4
to 6 and the identification study), each field with its range, description and hash
rule, beside the phases' models: one place to read what a config may say.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, cast

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from steering.directions import get_direction_source
from steering.probes import Predictor, TrainSpec
from steering.registry import Registry

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from steering.models import ModelSpec

# Per-concept detection quality that criterion 3 correlates with steering magnitude.
# (the same names as steering.probes.PREDICTORS; a test keeps the two in step).


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


# The phases a config may name (``phase:`` in its YAML), each with its own top model.
Phase = Literal["phase5", "calibration", "identify"]
# The shipped config of each phase, named in the error for a config of another phase.
PHASE_CONFIGS: dict[str, str] = {
    "phase5": "configs/phase5.yaml",
    "calibration": "configs/phase6.yaml",
    "identify": "configs/identify.yaml",
}


@dataclass(frozen=True)
class HashRule:
    """How a field enters :meth:`RunConfig.config_hash`, declared on the field itself
    (``Annotated[type, HashRule(...)]``) so the hash never grows a special case.

    ``exclude``: never (where results are written or work runs: no number changes).
    ``omit_if_default``: left out while its hash view equals its default's; the rule of
    a field added after runs were hashed, so their hashes hold.
    ``absent``: how the field enters the hash of a phase whose model lacks it: ``omit``,
    or ``default`` (its default, as the one config that every phase shared carried it)."""

    exclude: bool = False
    omit_if_default: bool = False
    absent: Literal["omit", "default"] = "omit"


INCLUDE = HashRule()
EXCLUDE = HashRule(exclude=True)
OMIT_IF_DEFAULT = HashRule(omit_if_default=True)


def hash_rule(info: FieldInfo) -> HashRule:
    """The field's declared rule (include when it declares none)."""
    return next((m for m in info.metadata if isinstance(m, HashRule)), INCLUDE)


@dataclass(frozen=True)
class Moved:
    """A field that moved from ``old`` to ``new`` (each ``section.field``) keeping its
    default, declared on the phase's top model (``MOVED``): a config or run folder that
    spells it the old way still reads (the value moves over; a different value given at
    both places is an error), and the hash places the value where it was, so every
    config hashes as it did before the move."""

    old: str
    new: str

    def parts(self) -> tuple[str, str, str, str]:
        old_section, old_field = self.old.split(".")
        new_section, new_field = self.new.split(".")
        return old_section, old_field, new_section, new_field


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
    dir: Annotated[str, EXCLUDE] = Field(
        "results/classifiers", description="where trained probes are cached"
    )
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


def _beta_value(value: object) -> float | str:
    """``steering.beta``: a finite number > 0, or ``auto``; one error, not one per type."""
    if value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"give a number > 0 (for example 0.2) or auto (got {value!r})")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number > 0, or auto (got {value!r})")
    if value <= 0:
        raise ValueError(f"must be greater than 0 (for example 0.2), or auto (got {value!r})")
    return float(value)


class SteeringConfig(_Strict):
    mode: Literal["additive", "projection"] = "additive"
    beta: Annotated[float | Literal["auto"], PlainValidator(_beta_value)] = Field(
        0.2,
        description="strength 1.0 adds beta × the median residual norm (finite, > 0); auto: "
        "the top of the model's recorded coherent range (steer-eval calibrate-strength); a "
        "config's β outside a recorded range is replaced by it (experiments/strength/range.py)",
    )
    vector_source: str = Field(
        "classifier",
        description="a registered direction source (steering/directions.py): classifier, "
        "diffmean, classifier_deformat, ...",
    )
    strengths: list[float] = Field(default_factory=lambda: [-1.0, 0.0, 1.0], min_length=2)
    vector_file: Annotated[str | None, OMIT_IF_DEFAULT] = Field(
        None,
        description="with vector_source file: your own vectors, one per concept - a "
        ".safetensors/.pt/.npz mapping, a folder of <concept>.npy/.pt/.safetensors/.gguf "
        "files, or a llama.cpp/repeng GGUF control vector (docs/vectors.md)",
    )
    # Vectors as deployed (docs/vectors.md, "Vectors as deployed"): fields added after
    # runs were hashed, so their defaults leave those hashes as they were.
    layers: Annotated[Literal["auto", "file"] | tuple[int, int], OMIT_IF_DEFAULT] = Field(
        "auto",
        description="where a file's vectors steer: auto = the run's layer alone; file = "
        "every layer the GGUF control vector holds, one hook per layer in one pass; [i, j] = "
        "the file's layers i to j, both included (llama.cpp's --control-vector-layer-range)",
    )
    scale: Annotated[Literal["unit", "file"], OMIT_IF_DEFAULT] = Field(
        "unit",
        description="unit = each vector normalised and steered at s·β·α_l (α_l the layer's "
        "median residual norm); file = the file's own vectors and norms, h_l += s·coefficient·"
        "v_l (repeng's set_control(vector, coefficient)); β is then not used",
    )
    coefficient: Annotated[float, OMIT_IF_DEFAULT] = Field(
        1.0,
        gt=0,
        description="with scale file: repeng's coefficient k (strength s adds s·k·v_l; the "
        "signs come from steering.strengths); at the run's layer it is β = k·‖v‖/α",
    )

    @model_validator(mode="after")
    def _as_deployed(self) -> SteeringConfig:
        deployed = self.layers != "auto" or self.scale != "unit"
        if deployed and self.vector_source != "file":
            raise ValueError(
                "steering.layers and steering.scale read a vector file's layers and norms: "
                "set steering.vector_source=file and steering.vector_file"
            )
        if deployed and self.mode != "additive":
            raise ValueError(
                "steering.layers file or a range, and scale file, add the file's vectors: "
                "use steering.mode additive"
            )
        if self.scale == "unit" and self.coefficient != 1.0:
            raise ValueError(
                "steering.coefficient is read with steering.scale: file (the file's norms "
                "times it); with scale unit the strength is β, so set scale: file or leave "
                "coefficient out"
            )
        if isinstance(self.layers, tuple) and not 0 <= self.layers[0] <= self.layers[1]:
            raise ValueError(
                f"steering.layers {list(self.layers)}: give [first, last] with "
                "0 ≤ first ≤ last (both included)"
            )
        return self

    @model_validator(mode="after")
    def _vector_file(self) -> SteeringConfig:
        if self.vector_source == "file" and not self.vector_file:
            raise ValueError(
                "vector_source file needs steering.vector_file (a file or folder of vectors, "
                "docs/vectors.md)"
            )
        if self.vector_file and self.vector_source != "file":
            raise ValueError(
                f"steering.vector_file is set but vector_source is {self.vector_source!r}; "
                "set steering.vector_source=file to steer with the file's vectors"
            )
        if self.vector_file and not Path(self.vector_file).exists():
            raise ValueError(f"steering.vector_file {self.vector_file!r} does not exist")
        return self

    @field_validator("vector_source")
    @classmethod
    def _vector_source(cls, value: str) -> str:
        get_direction_source(value)  # a ProbeError (a ValueError) naming the known ones
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
    samples_per_prompt: Annotated[int | None, OMIT_IF_DEFAULT] = Field(
        None,
        ge=1,
        description="samples per selection prompt (null: generation.samples_per_prompt): "
        "choose β as a cheaper run did while reporting on more samples",
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
    """The coherence gate: a steered text that fails it counts as no effect.

    It fails a text that is near-empty, echoes its prompt, has a perplexity above
    ``perplexity_multiple`` × its concept's unsteered median, or repeats itself beyond
    ``repetition_multiple`` × the ``repetition_quantile`` of the run's unsteered texts.

    Why repetition too: a collapse into a loop (one word or syllable said over and over)
    can have a low perplexity, since the model finds its own loop likely (a repeated
    Thai "มุม" at perplexity 5). The repetition measure (``metrics.text.repetition``:
    a text's length over its characters that no repeated 10-character n-gram covers; 1
    for prose that repeats nothing, about k for a phrase said k times) reads characters,
    so loops without spaces or words count. It is read against the run's own unsteered
    texts, as perplexity is against the concept's, pooled over the run rather than per
    concept: looping is the decoder's habit more than the concept's, and a concept has
    a handful of unsteered texts, too few for a high quantile. The 0.9 quantile lets the
    odd unsteered loop pass without raising the bar; × 2 fails a text at least half of
    which says again what it said already (prose scores 1.0-1.1). Defaults on; runs
    scored before it get it on ``steer-eval rescore``; ``repetition_multiple: null``
    turns it off. Neither rule changes Δ, only which texts count.

    The non-language rule fails a text whose share of alphabetic words
    (``metrics.text.alphabetic_share``: of its tokens, the runs of characters between
    whitespace and punctuation plus each markup tag, those made of letters of any script)
    is below ``alphabetic_multiple`` × the ``alphabetic_quantile`` of the run's unsteered
    texts' shares. Why: the null took gibberish. In the default run 13 of 60 random-
    direction texts passed the perplexity and repetition rules, 7 of them digits, codes,
    bare markup or whitespace ("Nutt65れい35 CFA666…", "POLHEN 11111181141…",
    "<b> \\n </b>"), which the model finds likely enough; their Δ (mean e −0.11) fed the
    effect above the null. Letters of any script count, so a model that writes Russian or
    Thai is not gated for it; digits and symbols inside a token make it no word, so
    "Nutt65" is not one. Read against the run's unsteered texts (pooled, as repetition),
    so it adapts to a model that writes numbers or markup anyway: the 0.1 quantile lets
    the odd unsteered text heavy in numbers or tags pass without lowering the bar (the
    embedded default's is 0.90), and × 0.75 fails a text whose share is a quarter below
    that (at most about two words in three: 0.67 on the default). Defaults on;
    ``alphabetic_multiple: null`` turns it off (``rescore --set``).
    """

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
    repetition_multiple: Annotated[float | None, OMIT_IF_DEFAULT] = Field(
        2.0,
        gt=1,
        description="fail a text whose repetition (its length over its characters that no "
        "repeated 10-character n-gram covers: ~k for a phrase said k times) exceeds this "
        "multiple of the unsteered texts' repetition_quantile; null: no repetition rule",
    )
    repetition_quantile: Annotated[float, OMIT_IF_DEFAULT] = Field(
        0.9,
        gt=0,
        le=1,
        description="the quantile of the run's unsteered texts' repetition that "
        "repetition_multiple multiplies",
    )
    alphabetic_multiple: Annotated[float | None, OMIT_IF_DEFAULT] = Field(
        0.75,
        gt=0,
        le=1,
        description="fail a text whose share of alphabetic words (runs of letters in any "
        "script between spaces and punctuation, against runs holding digits or symbols) "
        "is below this multiple of the unsteered texts' alphabetic_quantile; null: no "
        "non-language rule",
    )
    alphabetic_quantile: Annotated[float, OMIT_IF_DEFAULT] = Field(
        0.1,
        ge=0,
        lt=1,
        description="the quantile of the run's unsteered texts' alphabetic share that "
        "alphabetic_multiple multiplies",
    )


class LikelihoodConfig(_Strict):
    """The likelihood outcome: how a direction moves the model's log-likelihood of fixed
    on-concept texts against off-concept ones (teacher-forced, no sampling). One section
    for every phase: Phase 5 scores its vectors by it when ``enabled``, beside its nulls;
    identify scores every direction by it always (its texts, prefix and batch size here;
    the strengths are ``identify.strengths``)."""

    enabled: bool = Field(
        False, description="Phase 5: score every direction by the likelihood outcome beside Δ"
    )
    texts: int = Field(10, ge=2, description="on-concept texts per concept (each paired)")
    prefix: str = Field("Here is a text:", description="what the texts are scored after")
    neutral_nulls: int = Field(
        2,
        ge=0,
        description="Phase 5: null directions per concept: diffmeans of neutral-text splits",
    )
    other_nulls: int = Field(
        2, ge=0, description="Phase 5: null directions per concept: other concepts' directions"
    )
    batch_size: int = Field(
        64, ge=1, description="sequences per forward pass (identify's readout KL too)"
    )


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
    experiment: str = Field("phase6-calibration", description="the study's MLflow experiment")
    results_dir: Annotated[str, EXCLUDE] = Field(
        "results/phase6", description="where the study's run folders are written"
    )

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


_NUISANCES: tuple[Literal["isotropic", "pc", "other"], ...] = ("isotropic", "pc", "other")


class IdentifyConfig(_Strict):
    """Phase 6 that identifies (``steer-eval identify``): detection quality varied on its
    own around a reference direction, each direction scored as a detector and by how it
    steers (the likelihood outcome on every direction, generations on a subset)."""

    concept_set: Literal["development", "heldout", "listed"] = Field(
        "development",
        description="which half of the concept file to run: development (exploratory) or "
        "heldout (scored once per pre-registration; `steer-eval identify --heldout`); "
        "listed: exactly concepts.synsets (exploratory; held-out concepts only once their "
        "pre-registration's pool is scored)",
    )
    heldout_fraction: float = Field(0.5, gt=0, lt=1, description="share of concepts held out")
    split_seed: Seed = Field(0, description="seeds the development / held-out split")
    offset: Annotated[int, OMIT_IF_DEFAULT] = Field(
        0,
        ge=0,
        description="skip the set's first N concepts (before limit and shards): a later "
        "study on the rest of a held-out set (identify v4 after v3's first 300)",
    )
    limit: int | None = Field(None, ge=2, description="only the first N concepts of the set")
    shard_size: Annotated[int | None, OMIT_IF_DEFAULT] = Field(
        None,
        ge=1,
        description="a held-out set run in shards of this many concepts (in the split's "
        "order; `steer-eval identify --heldout --shard K`, then `--pool`): part of what a "
        "pre-registration binds, so every shard partitions the same set",
    )
    shard: Annotated[int | None, OMIT_IF_DEFAULT] = Field(
        None,
        ge=0,
        description="which shard this run scores (concepts K·shard_size onwards; set by "
        "`--shard K`, not by hand); left out of the pre-registration's study hash",
    )
    shards_dir: Annotated[str, EXCLUDE] = Field(
        "results-heldout",
        description="the committed folder each finished shard's directions.csv and ledger "
        "lines are copied to (<shards_dir>/<experiment>/shard-<K>/), which `--pool` reads",
    )
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
        default_factory=lambda: list(_NUISANCES),
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
    isocos_degrees: Annotated[list[Degrees], OMIT_IF_DEFAULT] = Field(
        default_factory=list,
        description="iso-cos design (identify v2): angles to v* at which each graded "
        "nuisance is mixed in, 90 being the nuisance alone (its own effect, the covariate); "
        "empty: off",
    )
    isocos_nuisances: Annotated[list[Seed], OMIT_IF_DEFAULT] = Field(
        default_factory=list,
        description="which graded nuisances (0: the discriminative residual ⟂ v*; 1, 2, …: "
        "covariance eigenvectors at ranks 1, 2, 4, 8, …) the iso-cos design uses",
    )
    isocos_draw: Annotated[Literal["graded", "random"], OMIT_IF_DEFAULT] = Field(
        "graded",
        description="how the iso-cos nuisances are made: graded (v2: one deterministic set, "
        "the same rule for every concept) or random (v3: per concept, a band of the "
        "covariance spectrum, stratified, and random signs over its eigenvectors; "
        "isocos_nuisances then numbers the draws)",
    )
    isocos_bands: Annotated[int, OMIT_IF_DEFAULT] = Field(
        4, ge=1, description="random iso-cos nuisances: log-spaced bands of the spectrum"
    )
    auroc_texts: Annotated[Literal["test", "held_out"], OMIT_IF_DEFAULT] = Field(
        "test",
        description="the texts a direction's AUROC and AP rank: the test split (v1, v2), or "
        "every held-out text, validation and test together (v3: AUROC needs no threshold, "
        "so the validation split's texts halve its measurement error; calibrated F1 stays "
        "on the test split with the validation threshold)",
    )
    geometry_texts: Annotated[Literal["none", "validation"], OMIT_IF_DEFAULT] = Field(
        "none",
        description="v4: every direction's cosine to the unit diffmean of the concept's "
        "validation texts (templates disjoint from every builder's training texts and from "
        "the test texts AUROC then ranks) is the column cos_validation: a geometry no "
        "builder and no detector saw, beside AUROC; needs auroc_texts: test",
    )
    reference_halves: Annotated[bool, OMIT_IF_DEFAULT] = Field(
        False,
        description="v3: v* from one half of the training templates and a second diffmean "
        "from the other half; every direction's cosine to the second is the column "
        "cos_half, an independent measure of its geometry that the equal-geometry estimand "
        "corrects with (errors in variables, estimator.equal_geometry); false: v* from "
        "every training text (v2)",
    )
    subset_concepts: Annotated[int, OMIT_IF_DEFAULT] = Field(
        0,
        ge=0,
        description="identify v2: this many concepts (stratified by v*'s test AUROC) where "
        "every direction is also steered at fixed and KL-matched doses and generated from "
        "(identify/matched.py); 0: off",
    )
    subset_doses: Annotated[list[Annotated[float, Field(gt=0)]], OMIT_IF_DEFAULT] = Field(
        default_factory=lambda: [0.5, 2.0],
        description="the subset's fixed doses, multiples of v*'s β (1× is the main outcome)",
    )
    subset_generate: Annotated[bool, OMIT_IF_DEFAULT] = Field(
        True,
        description="generate from every direction of the subset on the report prompts "
        "(the generated outcome, Δ gated)",
    )
    subset_prompts: Annotated[list[str], OMIT_IF_DEFAULT] = Field(
        default_factory=list,
        description="more report prompts for the subset's generated outcome, after "
        "generation.prompts (the selection prompts, the KL readout and the validating "
        "directions keep generation.prompts)",
    )
    dose_kl: Annotated[Literal["all", "concept_free"], OMIT_IF_DEFAULT] = Field(
        "all",
        description="the next-token KL the subset's dose is matched on: 'all' (the whole "
        "vocabulary, v2) or 'concept_free' (the concept's own tokens, those the logit-lens "
        "gain reads, left out of both distributions and each renormalised: the mass moved "
        "onto them is part of the outcome, so matching on it matches partly on the outcome)",
    )
    dose_verify: Annotated[bool, OMIT_IF_DEFAULT] = Field(
        False,
        description="split the dose's prompts (seeded, identify/matched.py "
        "matching_split): bisect on one half, then measure each direction's KL at its "
        "matched dose on the other half against v*'s there (the share matched on "
        "held-apart contexts); false: matched and checked on the same prompts (v2)",
    )
    name_free: Annotated[bool, OMIT_IF_DEFAULT] = Field(
        False,
        description="identify v2: every direction also scored on name-free test positives "
        "(AUROC), and the subset's likelihood outcome on name-free texts "
        "(identify/namefree.py): detection and outcome without the name channel",
    )
    name_free_keep: Annotated[float, OMIT_IF_DEFAULT] = Field(
        1.0,
        gt=0,
        le=1,
        description="the fraction of each concept's name-free texts kept, those the "
        "unsteered model reads best (lowest per-token NLL after likelihood.prefix); 1 keeps all",
    )
    null_draws: int = Field(
        2,
        ge=0,
        description="extra isotropic random directions per concept; with rotation:isotropic:90 "
        "they are the concept's null",
    )
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
    experiment: str = Field("phase6-identify", description="the study's MLflow experiment")
    results_dir: Annotated[str, EXCLUDE] = Field(
        "results/identify", description="where the study's run folders are written"
    )

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

    @model_validator(mode="after")
    def _geometry_texts(self) -> IdentifyConfig:
        if self.geometry_texts == "validation" and self.auroc_texts != "test":
            raise ValueError(
                "identify.geometry_texts: validation measures geometry on the validation "
                "texts, so AUROC must rank the test texts only: set identify.auroc_texts: test"
            )
        return self

    @model_validator(mode="after")
    def _sharded(self) -> IdentifyConfig:
        if self.shard is not None and (self.shard_size is None or self.concept_set != "heldout"):
            raise ValueError(
                "identify.shard needs identify.shard_size and the held-out set "
                "(`steer-eval identify --heldout --shard K` on a config with a shard_size)"
            )
        return self


class TrackingConfig(_Strict):
    """MLflow settings every phase shares. A phase's own experiment and results folder
    sit in its own section (:class:`Phase5TrackingConfig`, ``calibration``, ``identify``)
    and are read through :attr:`RunConfig.experiment` and :attr:`RunConfig.results_dir`."""

    classifier_experiment: str = "phase4-classifiers"
    traces: bool = Field(
        True,
        description="one MLflow trace per generation with its scores as feedback (about "
        "0.1 s each on sqlite; false for grids of many thousands)",
    )
    evaluation: Annotated[bool, EXCLUDE] = Field(
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


class Phase5TrackingConfig(TrackingConfig):
    """Phase 5's tracking: the shared settings plus its experiment and results folder."""

    # In every phase's hash: the phases' one config carried it (at this default) before
    # the studies had models of their own.
    experiment: Annotated[str, HashRule(absent="default")] = Field(
        "phase5-semantic-steering", description="the MLflow experiment of Phase 5 runs"
    )
    results_dir: Annotated[str, EXCLUDE] = Field(
        "results/phase5", description="where Phase 5 run folders are written"
    )


class ExecutionConfig(_Strict):
    """Where the generation stage runs. Not in the hash (declared on ``execution``): on
    one machine a Ray run gives the local run's numbers bit for bit, because its actors use
    the driver's torch thread count (fp32 CPU attention over the KV cache depends on it:
    docs/scale-out.md)."""

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


def _model_classes(annotation: Any) -> list[type[BaseModel]]:
    return (
        [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    )


def _hash_view(value: Any, classes: list[type[BaseModel]]) -> Any:
    """``value`` as it enters the hash, under the rules its fields declare. ``classes``
    are the models that hold this place in every phase: a field one of them declares and
    ``value`` lacks enters by its ``absent`` rule, so a phase's hash is the hash that the
    one shared config of old gave its settings."""
    if not isinstance(value, BaseModel):
        return to_jsonable_python(value)
    out: dict[str, Any] = {}
    own = type(value).model_fields
    for name in dict.fromkeys(n for cls in [type(value), *classes] for n in cls.model_fields):
        infos = [
            cls.model_fields[name] for cls in [type(value), *classes] if name in cls.model_fields
        ]
        rule = hash_rule(infos[0])
        if rule.exclude:
            continue
        nested = [c for info in infos for c in _model_classes(info.annotation)]
        if name in own:
            view = _hash_view(getattr(value, name), nested)
            if rule.omit_if_default:
                default = own[name].get_default(call_default_factory=True)
                if view == _hash_view(default, nested):
                    continue
        elif rule.absent == "default":
            view = _hash_view(infos[0].get_default(call_default_factory=True), nested)
        else:
            continue
        out[name] = view
    return out


def _drop_other_phases(data: Any, cls: type[BaseModel], classes: Sequence[type[BaseModel]]) -> Any:
    """``data`` without the keys that only the other phases' models (``classes``) declare."""
    if not isinstance(data, dict):
        return data
    own = cls.model_fields
    out = {}
    for key, value in data.items():
        if key in own:
            nested = [
                c
                for other in classes
                if key in other.model_fields
                for c in _model_classes(other.model_fields[key].annotation)
            ]
            mine = _model_classes(own[key].annotation)
            out[key] = _drop_other_phases(value, mine[0], nested) if mine else value
        elif not any(key in other.model_fields for other in classes):
            out[key] = value  # unknown everywhere: validation names it
    return out


class RunConfig(_Strict):
    """The settings every phase shares (Phase 4 + 5: model, concepts, probes, steering,
    generation, scoring, criteria, tracking, execution). A phase's top model adds only its
    own section and owns its MLflow experiment and results folder: :class:`Phase5Config`,
    :class:`CalibrationStudyConfig`, :class:`IdentifyStudyConfig`. Phase 5 stages take any
    of them (the studies run Phase 5 stages)."""

    # The section that holds the phase's ``experiment`` and ``results_dir`` (each top
    # model names its own).
    OWN_SECTION: ClassVar[str]

    # Which top model reads the YAML; left out of the hash (each phase's hash is the one
    # its settings had when every phase shared one config).
    phase: Annotated[Phase, EXCLUDE] = Field(
        "phase5", description="the phase this config is for: phase5, calibration or identify"
    )
    name: str = "phase5"
    seed: Seed = 0
    model: str = "embedded"
    # A field added after runs were hashed: its default leaves their hashes as they were.
    model_load_format: Annotated[Literal["auto", "dummy"], OMIT_IF_DEFAULT] = Field(
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
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    centroids: CentroidConfig = Field(default_factory=CentroidConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    criteria: CriteriaConfig = Field(default_factory=CriteriaConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    # A local and a Ray run of one config give the same numbers.
    execution: Annotated[ExecutionConfig, EXCLUDE] = Field(default_factory=ExecutionConfig)

    # Fields this phase reads from another place than they once had (see :class:`Moved`).
    MOVED: ClassVar[tuple[Moved, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _moved_fields(cls, data: Any) -> Any:
        """Read a moved field's old spelling (:class:`Moved`): the value moves to its new
        place. An old run folder's config carries both places (every section was dumped
        whole), and an overlay or ``--set`` may give the other spelling, so a value at its
        default yields to the other; two different values, neither the default, are an
        error."""
        if not isinstance(data, dict) or not cls.MOVED:
            return data
        data = dict(data)
        for moved in cls.MOVED:
            old_section, old_field, new_section, new_field = moved.parts()
            section = data.get(old_section)
            if not isinstance(section, dict) or old_field not in section:
                continue
            section = dict(section)
            value = section.pop(old_field)
            data[old_section] = section
            target = dict(data.get(new_section) or {})
            default = cls._field_default(new_section, new_field)
            given = target.get(new_field, default)
            if value != given and default not in (value, given):
                raise ValueError(
                    f"{moved.old} and {moved.new} disagree ({value!r}, {given!r}): "
                    f"{moved.old} moved to {moved.new}; give it there only"
                )
            target[new_field] = given if value == default else value
            data[new_section] = target
        return data

    @classmethod
    def _field_default(cls, section: str, name: str) -> Any:
        (model,) = _model_classes(cls.model_fields[section].annotation)
        return model.model_fields[name].get_default(call_default_factory=True)

    @model_validator(mode="before")
    @classmethod
    def _old_layout(cls, data: Any) -> Any:
        """Read the layout of before phases had models of their own. Then one config
        carried every section, so an old run folder's ``config.yaml`` and its record's
        ``config`` hold ``calibration:``, ``identify:`` and ``tracking.experiment`` /
        ``results_dir`` whatever the phase, and no ``phase:``. Such a mapping (no
        ``phase:``) is read as this phase: the sections only another phase declares are
        dropped (this phase never read them), so ``rescore`` of old runs works. A config
        that names its phase gets no such leniency: another phase's section is an error."""
        if not isinstance(data, dict) or "phase" in data or cls is RunConfig:
            return data
        others = [c for c in PHASE_MODELS.values() if c is not cls]
        return _drop_other_phases(data, cls, others)

    @model_validator(mode="after")
    def _suppression_prompts_name_the_concept(self) -> RunConfig:
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
    def _beta_auto_is_for_runs(self) -> RunConfig:
        if self.steering.beta == "auto" and self.phase != "phase5":
            raise ValueError(
                f"steering.beta auto is read by `steer-eval run` only; give the {self.phase} "
                "study a number (the range `steer-eval calibrate-strength` found: "
                "strength_range.json in the model's classifier folder)"
            )
        return self

    @model_validator(mode="after")
    def _as_deployed_is_for_runs(self) -> RunConfig:
        steering = self.steering
        if steering.layers == "auto" and steering.scale == "unit":
            return self
        if self.phase != "phase5":
            raise ValueError(
                f"steering.layers and steering.scale are read by `steer-eval run` only; the "
                f"{self.phase} study steers one layer at α·β (leave them at auto and unit)"
            )
        if steering.scale == "file" and self.selection.mode == "heldout":
            raise ValueError(
                "steering.scale file steers at the file's norms × coefficient, so there is no "
                "β for held-out selection to choose: set selection.mode none"
            )
        if steering.scale == "file" and steering.beta == "auto":
            raise ValueError(
                "steering.beta auto picks a β, but steering.scale file does not use one "
                "(the file's norms × coefficient): leave steering.beta at a number"
            )
        return self

    @model_validator(mode="after")
    def _heldout_needs_prompts(self) -> RunConfig:
        if self.selection.mode == "heldout" and len(self.generation.prompts) < 2:
            raise ValueError(
                "selection.mode heldout splits each concept's prompts into a selection and "
                "a report half: give generation.prompts at least 2 prompts (6 or more for "
                "a study), or set selection.mode: none"
            )
        return self

    @property
    def model_spec(self) -> ModelSpec:
        """The model section (``model``, ``device``, ``dtype``, ``model_load_format``) as
        one ``steering.models.ModelSpec``, passed whole to whatever loads the model."""
        from steering.models import ModelSpec  # torch: only when a model is wanted

        return ModelSpec(self.model, self.device, self.dtype, self.model_load_format)

    @property
    def experiment(self) -> str:
        """This phase's MLflow experiment (from its own section)."""
        return cast(str, getattr(self, self.OWN_SECTION).experiment)

    @property
    def results_dir(self) -> str:
        """Where this phase's run folders are written (from its own section)."""
        return cast(str, getattr(self, self.OWN_SECTION).results_dir)

    def config_hash(self) -> str:
        """A short hash of the resolved config, to tell runs' settings apart at a glance.
        Each field enters by the :class:`HashRule` declared on it: left out are the
        folders a run writes to or caches in and ``execution`` (they change where results
        land or where work runs, not what they are); a field added later is left out at
        its default; a section another phase carries enters by its ``absent`` rule. So
        every phase's hash is the one its settings had when the phases shared a config
        (``tests/experiments/test_config_hash.py`` holds them)."""
        data = _hash_view(self, list(PHASE_MODELS.values()))
        if self.MOVED:
            data = self._hash_before_moves(data)
        blob = json.dumps(data, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def _hash_before_moves(self, data: dict[str, Any]) -> dict[str, Any]:
        """The hash view with every moved field back at its old place (and its new place
        at its default), the old section left out again where its rule omits it at its
        default: the view the config had before the move."""
        defaults: dict[str, dict[str, Any]] = {}  # old section -> its default view
        for moved in self.MOVED:
            old_section, old_field, new_section, new_field = moved.parts()
            (model,) = _model_classes(type(self).model_fields[old_section].annotation)
            if old_section not in defaults:
                defaults[old_section] = _hash_view(model(), [model])
            default = to_jsonable_python(self._field_default(new_section, new_field))
            defaults[old_section][old_field] = default
            value = data[new_section][new_field]
            data[new_section] = {**data[new_section], new_field: default}
            section = data.get(old_section, dict(defaults[old_section]))
            data[old_section] = {**section, old_field: value}
        for section, default_view in defaults.items():
            rule = hash_rule(type(self).model_fields[section])
            if rule.omit_if_default and data[section] == default_view:
                del data[section]
        return data

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


# Every Phase 5 stage takes a config of any phase: the name the stages' type hints use.
ExperimentConfig = RunConfig


class Phase5Config(RunConfig):
    """Phase 5 (``steer-eval run``); ``configs/phase5.yaml`` holds the seed's values."""

    OWN_SECTION: ClassVar[str] = "tracking"

    phase: Annotated[Literal["phase5"], EXCLUDE] = "phase5"
    tracking: Phase5TrackingConfig = Field(default_factory=Phase5TrackingConfig)


class CalibrationStudyConfig(RunConfig):
    """Phase 6, the calibration study (``steer-eval calibrate``, ``configs/phase6.yaml``)."""

    OWN_SECTION: ClassVar[str] = "calibration"

    phase: Annotated[Literal["calibration"], EXCLUDE] = "calibration"
    # Every other phase's hash carries it at its defaults, as their shared config did.
    calibration: Annotated[CalibrationConfig, HashRule(absent="default")] = Field(
        default_factory=CalibrationConfig
    )


class IdentifyStudyConfig(RunConfig):
    """Phase 6 that identifies (``steer-eval identify``, ``configs/identify.yaml``)."""

    OWN_SECTION: ClassVar[str] = "identify"

    phase: Annotated[Literal["identify"], EXCLUDE] = "identify"
    # The likelihood outcome's settings had a second copy in this section once.
    MOVED: ClassVar[tuple[Moved, ...]] = (
        Moved("identify.texts_per_concept", "likelihood.texts"),
        Moved("identify.prefix", "likelihood.prefix"),
        Moved("identify.batch_size", "likelihood.batch_size"),
    )
    # Added after runs were hashed: at its defaults (or absent) it leaves hashes as they were.
    identify: Annotated[IdentifyConfig, OMIT_IF_DEFAULT] = Field(default_factory=IdentifyConfig)


PHASE_MODELS: Registry[type[RunConfig]] = Registry("phase")
PHASE_MODELS.register("phase5", Phase5Config)
PHASE_MODELS.register("calibration", CalibrationStudyConfig)
PHASE_MODELS.register("identify", IdentifyStudyConfig)


def _other_phase(loc: tuple[int | str, ...], phase: str) -> str | None:
    """The phase whose model declares the key at ``loc`` (``calibration``, ...), if not ours."""
    for name, cls in PHASE_MODELS.items():
        node: type[BaseModel] | None = cls
        for part in loc:
            fields = node.model_fields if node is not None else {}
            if part not in fields:
                node = None
                break
            found = _model_classes(fields[part].annotation)
            node = found[0] if found else None
        else:
            if name != phase:
                return name
    return None


def _fields_at(cls: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the section at ``loc`` (its parent's, for a leaf)."""
    node: type[BaseModel] | None = cls
    for part in loc:
        fields = node.model_fields if node is not None else {}
        found = _model_classes(fields[part].annotation) if part in fields else []
        node = found[0] if found else None
        if node is None:
            return []
    return list(node.model_fields) if node is not None else []


def did_you_mean(cls: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """`` (did you mean steering.strengths?)`` for a misspelt key, else ``""``."""
    import difflib

    names = _fields_at(cls, tuple(loc[:-1]))
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f" (did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?)" if close else ""


# pydantic's wording of a bound or length, rewritten as what to give (one line each).
def _plain(err: ErrorDetails) -> str:
    ctx, kind = err.get("ctx") or {}, err["type"]
    got = f" (got {err.get('input')!r})"
    bounds = {
        "greater_than": "greater than {gt}",
        "greater_than_equal": "at least {ge}",
        "less_than": "less than {lt}",
        "less_than_equal": "at most {le}",
    }
    if kind in bounds:
        return "must be " + bounds[kind].format(**ctx) + got
    if kind == "too_short":
        return f"give at least {ctx.get('min_length')} values{got}"
    if kind == "too_long":
        return f"give at most {ctx.get('max_length')} values{got}"
    if kind == "finite_number":
        return "must be a finite number" + got
    if kind == "literal_error":
        return f"use one of {ctx.get('expected')}{got}"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return err["msg"].split(",")[0].replace("Input should be", "must be") + got
    return err["msg"].removeprefix("Value error, ")


def _format_errors(
    exc: ValidationError,
    source: str,
    phase: str = "phase5",
    overridden: dict[str, str] | None = None,
) -> str:
    """One line per bad field: its dotted name, what is wrong, and the fix; a field set
    with ``--set`` is named as such (not blamed on the YAML file)."""
    overridden = overridden or {}
    lines = [f"invalid configuration in {source}:"]
    for err in exc.errors():
        loc = tuple(err["loc"])
        field = ".".join(str(p) for p in loc) or "(top level)"
        msg = _plain(err)
        other = _other_phase(loc, phase) if err["type"] == "extra_forbidden" else None
        if other is not None:
            msg = (
                f"a {other} setting, but this is a {phase} config (phase: {phase}): drop "
                f"it, or set it in a {other} config (like {PHASE_CONFIGS[other]})"
            )
            own = PHASE_MODELS[phase].OWN_SECTION
            leaf = loc[-1]
            if leaf in ("experiment", "results_dir") and loc[0] != own:
                msg += f"; this phase's {leaf} is {own}.{leaf}"
        elif err["type"] == "extra_forbidden":
            hint = did_you_mean(PHASE_MODELS[phase], loc)
            where = "--set key" if field in overridden else "key"
            msg = f"unknown {where}{hint}; the keys are those of {PHASE_CONFIGS[phase]}"
        given = next((t for k, t in overridden.items() if field == k or field.startswith(k)), None)
        if given is not None:
            msg += f" (from --set {given})"
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


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
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


def _read_yaml(path: str | Path, what: str = "config") -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} must be a mapping of sections, got {type(data).__name__}")
    return data


def merge_overlay(data: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``overlay`` over ``data``: sections merge key by key, any other value replaces."""
    out = dict(data)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_overlay(out[key], value)
        else:
            out[key] = value
    return out


def _check_phase(named: Any, source: str, phase: str | None) -> None:
    if named is None:
        return
    if named not in PHASE_MODELS:
        raise ConfigError(
            f"invalid configuration in {source}:\n  - phase: {PHASE_MODELS.unknown(named)}"
        )
    if phase is not None and named != phase:
        raise ConfigError(
            f"{source} is a {named} config (phase: {named}), but this command runs {phase}: "
            f"pass a {phase} config (like {PHASE_CONFIGS[phase]}), or set phase: {phase} "
            "in the file if it is meant for this command"
        )


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    phase: Phase | None = None,
    overlays: Sequence[str | Path] = (),
) -> RunConfig:
    """Read a YAML config (or the defaults), merge ``overlays`` (YAML files such as
    ``configs/quick/calibrate.yaml``) over it, apply overrides, validate.

    The YAML's ``phase:`` picks the model (:data:`PHASE_MODELS`). ``phase`` is the phase
    the command runs: a config naming another is refused; one that names none (an old
    run folder, a user's file) is read as that phase, or as phase5 when ``phase`` is None.
    """
    source = str(path) if path else "(defaults)"
    data: dict[str, Any] = _read_yaml(path) if path is not None else {}
    _check_phase(data.get("phase"), source, phase)
    chosen = data.get("phase") or phase or "phase5"
    if path is None:
        data["phase"] = chosen  # the defaults of a phase are never the old layout
    for overlay in overlays:
        extra = _read_yaml(overlay, "overlay")
        # the overlay's phase says which configs it is for; it leaves the config's as it is
        _check_phase(extra.pop("phase", None), f"overlay {overlay}", chosen)
        data = merge_overlay(data, extra)
    data = apply_overrides(data, overrides or [])
    _check_phase(data.get("phase"), f"{source} with its overrides", chosen)
    overridden = {".".join(parse_override(t)[0]): t for t in overrides or []}
    try:
        return PHASE_MODELS[chosen].model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, source, chosen, overridden)) from None


def dump_config(config: RunConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
