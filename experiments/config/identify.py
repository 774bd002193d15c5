"""The identification study (``steer-eval identify``): its own section,
:class:`IdentifyConfig`, and its top model, which reads the likelihood settings that
once sat in its section (``MOVED``)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from experiments.config.base import (
    EXCLUDE,
    OMIT_IF_DEFAULT,
    Moved,
    Seed,
    TrainSize,
    _check_train_size,
    _Strict,
)
from experiments.config.common import RunConfig

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
    reference_size: TrainSize = Field(
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
        "(identify/stages/matched.py); 0: off",
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
        description="split the dose's prompts (seeded, identify/stages/matched.py "
        "matching_split): bisect on one half, then measure each direction's KL at its "
        "matched dose on the other half against v*'s there (the share matched on "
        "held-apart contexts); false: matched and checked on the same prompts (v2)",
    )
    name_free: Annotated[bool, OMIT_IF_DEFAULT] = Field(
        False,
        description="identify v2: every direction also scored on name-free test positives "
        "(AUROC), and the subset's likelihood outcome on name-free texts "
        "(identify/stages/namefree.py): detection and outcome without the name channel",
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
