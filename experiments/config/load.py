"""Reading a config: the phases' top models registered in :data:`PHASE_MODELS`, YAML
files and overlays, ``--set`` overrides, and validation errors rewritten as one line per
field with its fix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ValidationError

from experiments.config.base import PHASE_CONFIGS, ConfigError, Phase, _model_classes
from experiments.config.calibration import CalibrationStudyConfig
from experiments.config.common import PHASE_MODELS, RunConfig
from experiments.config.identify import IdentifyStudyConfig
from experiments.config.phase5 import Phase5Config

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

PHASE_MODELS.register("phase5", Phase5Config)
PHASE_MODELS.register("calibration", CalibrationStudyConfig)
PHASE_MODELS.register("identify", IdentifyStudyConfig)


def _other_phase(loc: tuple[int | str, ...], phase: str) -> str | None:
    """The phase whose model declares the key at ``loc`` (``calibration``, ...), if not ours."""
    return next(
        (
            name
            for name, cls in PHASE_MODELS.items()
            if name != phase and loc[-1] in _fields_at(cls, loc[:-1])
        ),
        None,
    )


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
