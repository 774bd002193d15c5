"""The sections every phase shares: concepts, probes, steering, controls, held-out
selection, the coherence gate, the likelihood outcome, generation, embedding, centroids,
metrics, criteria, tracking and execution. :class:`experiments.config.common.RunConfig`
holds one of each; a phase's own section sits in the phase's module."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PlainValidator, field_validator, model_validator

from experiments.config.base import (
    CPU_BATCH_ROWS,
    EXCLUDE,
    OMIT_IF_DEFAULT,
    DeltaUnits,
    TrainSize,
    _Strict,
)
from steering.directions import get_direction_source
from steering.probes import Predictor


class ConceptsConfig(_Strict):
    file: str = "data/concepts/wordnet_top10.json"
    limit: int | None = Field(None, ge=1, description="use only the first N concepts")
    synsets: list[str] | None = Field(None, description="use only these synset ids")


class ClassifierConfig(_Strict):
    train: TrainSize = "1x1x1"
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
        "config's β outside a recorded range is replaced by it (experiments/strength_range.py)",
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
    # Per-concept detection quality that criterion 3 correlates with steering magnitude.
    # (the same names as steering.probes.PREDICTORS; a test keeps the two in step).
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
