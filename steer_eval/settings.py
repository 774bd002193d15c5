"""Keyword arguments as the command line's settings: ``--set key=value`` strings.

:func:`steer_eval.evaluate` builds the config exactly as ``steer-eval run`` does, from
the same config file and the same ``--set`` overrides (``--model``, ``--layer``,
``--concepts`` and ``--results-dir`` kept apart as the command keeps them), so both
validate to the same config and hash, and take β by the same rule
(``experiments.strength_range.kept_keys`` reads which keys were set). Every keyword is
written as an override here, and the call's equivalent command line is the same list.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from steer_eval.errors import ArgumentError


def value_text(value: object) -> str:
    """``value`` as the YAML an override's right-hand side is read with
    (``experiments.config.parse_override``): a plain string stays as it is when it reads
    back as itself, anything else is written as JSON (which YAML reads)."""
    import yaml

    if isinstance(value, Path):
        value = str(value)
    item = getattr(value, "item", None)  # a numpy scalar
    if callable(item) and not isinstance(value, str | bytes):
        value = item()
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, str):
        try:
            same = value != "" and value.strip() == value and yaml.safe_load(value) == value
        except yaml.YAMLError:
            same = False
        return value if same else json.dumps(value)
    try:
        return json.dumps(value)
    except TypeError:
        raise ArgumentError(
            f"{value!r} ({type(value).__name__}) cannot be a setting; give a number, a "
            "string, a bool, None or a list of them"
        ) from None


def flatten(key: str, value: object) -> Iterator[tuple[str, object]]:
    """``("generation", {"max_new_tokens": 6})`` as ``("generation.max_new_tokens", 6)``."""
    if isinstance(value, Mapping):
        if not value:
            raise ArgumentError(f"{key}: an empty mapping sets nothing; leave it out")
        for inner, v in value.items():
            yield from flatten(f"{key}.{inner}", v)
    else:
        yield key, value


def override(key: str, value: object) -> str:
    return f"{key}={value_text(value)}"


def mapping_overrides(values: Mapping[str, object], check: Callable[[object], None]) -> list[str]:
    """``{key: value}`` as overrides, a mapping value as its section's keys (:func:`flatten`),
    each key first passed to ``check`` (which raises for a key it refuses)."""
    out = []
    for key, value in values.items():
        check(key)
        out += [override(k, v) for k, v in flatten(key, value)]
    return out


def option_overrides(options: Mapping[str, object], own: Sequence[str]) -> list[str]:
    """``**options`` (top-level config keys; a section as a mapping) as overrides; a
    name that is no config key is refused with the closest one (``own``: evaluate's own
    parameters, also suggested)."""
    from experiments.config import Phase5Config

    fields = sorted(set(Phase5Config.model_fields) - {"phase"})

    def check(name: object) -> None:
        if name not in fields:
            close = difflib.get_close_matches(str(name), [*fields, *own], n=1)
            hint = f" (did you mean {close[0]}=?)" if close else ""
            raise ArgumentError(
                f"{name}=: no such argument or config key{hint}; options are the config's "
                f"top-level keys ({', '.join(fields)}), a section as a mapping: "
                "generation={'max_new_tokens': 20}"
            )

    return mapping_overrides(options, check)


def given_overrides(overrides: Sequence[str] | Mapping[str, object]) -> list[str]:
    """``overrides=``: ``--set`` strings, or a mapping of dotted key to value."""
    if isinstance(overrides, Mapping):

        def check(key: object) -> None:
            if not isinstance(key, str) or not key:
                raise ArgumentError(f"overrides: key {key!r} is not a dotted config key")

        return mapping_overrides(overrides, check)
    if isinstance(overrides, str):
        raise ArgumentError(
            f"overrides: give a list of 'key=value' strings ([{overrides!r}]) or a mapping "
            "{'key': value}, not one string"
        )
    texts = list(overrides)
    for text in texts:
        if not isinstance(text, str) or "=" not in text:
            raise ArgumentError(
                f"overrides: {text!r} is not 'key.path=value' (as --set takes it: "
                "'generation.max_new_tokens=20')"
            )
    return texts


@dataclass
class Settings:
    """One call's settings as ``steer-eval run`` takes them: the ``--set`` overrides
    (``sets``), and the options the command turns into overrides after them."""

    config: Path
    sets: list[str] = field(default_factory=list)
    model: str | None = None
    layer: int | None = None
    limit: int | None = None
    results_dir: str | None = None
    # which argument set each key, to refuse one key given twice
    origin: dict[str, str] = field(default_factory=dict)

    def add(self, text: str, argument: str) -> None:
        """One ``--set`` override, from ``argument`` (its name, for the error)."""
        from experiments.config import parse_override

        key = ".".join(parse_override(text)[0])  # the dotted key it sets
        before = self.origin.get(key)
        if before is not None and before != argument:
            raise ArgumentError(
                f"{key} is given twice, by {before} and by {argument}; give it once"
            )
        self.origin[key] = argument
        self.sets.append(text)

    def add_all(self, texts: Iterable[str], argument: str | Callable[[str], str]) -> None:
        """Each of ``texts`` by :meth:`add`, from ``argument`` (a name, or the name of the
        argument that set a text, from the text)."""
        for text in texts:
            self.add(text, argument if isinstance(argument, str) else argument(text))

    def overrides(self, sets: Sequence[str] | None = None) -> list[str]:
        """The overrides ``load_config`` applies, in the command's order: the ``--set``
        list (``sets``, default all), then ``--results-dir``, ``--model``, ``--layer``,
        ``--concepts`` (``cli/main.run`` and ``cli/common.resolve_config``)."""
        given = (
            ("tracking.results_dir", self.results_dir),
            ("model", self.model),
            ("layer", self.layer),
            ("concepts.limit", self.limit),
        )
        out = list(self.sets if sets is None else sets)
        return out + [f"{key}={value}" for key, value in given if value is not None]

    def argv(self, layer_rule: str | None = None) -> list[str]:
        """The equivalent ``steer-eval run`` arguments (after the program's name)."""
        layer = layer_rule if layer_rule is not None else self.layer
        given = (
            ("--model", self.model),
            ("--layer", layer),
            ("--concepts", self.limit),
            ("--results-dir", self.results_dir),
            *(("--set", text) for text in self.sets),
        )
        out = ["run", "--config", str(self.config)]
        return out + [part for flag, v in given if v is not None for part in (flag, str(v))]

    def command(self, layer_rule: str | None = None) -> str:
        """The equivalent command line, quoted for a POSIX shell."""
        return shlex.join(["steer-eval", *self.argv(layer_rule)])
