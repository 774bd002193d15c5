"""The settings every phase shares, :class:`RunConfig` (its sections in
:mod:`experiments.config.sections`), how it hashes, and :data:`PHASE_MODELS`, the
registry of the phases' top models (registered in :mod:`experiments.config.load`)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, cast

from pydantic import Field, field_validator, model_validator
from pydantic_core import to_jsonable_python

from experiments.config.base import (
    EXCLUDE,
    OMIT_IF_DEFAULT,
    Moved,
    Phase,
    Seed,
    _drop_other_phases,
    _hash_view,
    _model_classes,
    _Strict,
    flat_keys,
    hash_rule,
)
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
from steering.registry import Registry

if TYPE_CHECKING:
    from steering.models import ModelSpec


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
        return _drop_other_phases(data, cls, [c for c in PHASE_MODELS.values() if c is not cls])

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
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]

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
        return flat_keys(self.model_dump(mode="json"))


# The phases' top models, registered in experiments.config.load in this order.
PHASE_MODELS: Registry[type[RunConfig]] = Registry("phase")
