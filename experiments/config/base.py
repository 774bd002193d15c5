"""The config's foundations: the errors and phase names, how a field enters the hash
(:class:`HashRule`), a field that moved (:class:`Moved`), the strict base every section
extends, the shared value types, and the hash view itself (:func:`_hash_view`), which
every phase's top model reads through :meth:`RunConfig.config_hash`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from steering.probes import TrainSpec

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


def _check_train_size(text: str) -> str:
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
    return text


# A probe training size (PxNxU) that the train template pool can fill.
TrainSize = Annotated[str, AfterValidator(_check_train_size)]


def flat_keys(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (``a.b`` for ``{a: {b: ...}}``) to their leaf values."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, sub in value.items():
        out.update(flat_keys(sub, f"{prefix}.{key}" if prefix else str(key)))
    return out


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
