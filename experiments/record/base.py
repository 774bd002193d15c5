"""What every phase's record shares: the error, the reader that checks format and
version, the base of a record and of a closed analysis block."""

from __future__ import annotations

from typing import ClassVar, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)


class RecordError(ValueError):
    """A run record is unreadable, of another format, or of an unsupported version."""


R = TypeVar("R", bound=BaseModel)


def read_record(
    cls: type[R],
    text: str,
    source: str,
    migratable: tuple[int, ...] = (),
    fix: str = "",
) -> R:
    """Any phase's record from its JSON: of ``cls``'s format and version (or one of
    ``migratable``, read as this version), else a :class:`RecordError` naming what was
    found, then ``fix``."""
    import json

    fmt = cls.model_fields["format"].default
    version = cls.model_fields["version"].default
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise RecordError(f"{source} is not a {fmt} record (a run from an older release?){fix}")
    if data.get("version") in migratable:
        data["version"] = version
    if data.get("version") != version:
        raise RecordError(
            f"{source} is {fmt} version {data.get('version')}, this release reads version "
            f"{version}{fix}"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise RecordError(f"{source} does not match the {fmt} schema: {exc}") from exc


class _Record(BaseModel):
    """A phase's record: ``format`` and ``version`` first; every field documented."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    experiment: str = Field(description="the MLflow experiment of the parent run")
    model_id: str
    timings: dict[str, float] = Field(default_factory=dict, description="seconds per stage")

    # earlier versions this one reads (their changed blocks migrate in validators)
    MIGRATABLE: ClassVar[tuple[int, ...]] = ()

    @classmethod
    def parse(cls, text: str, source: str = "record") -> Self:
        """Read a record of this format and version (or a migratable one), or fail
        naming what was found."""
        return read_record(cls, text, source, cls.MIGRATABLE)


class _Block(BaseModel):
    """An analysis block: every key declared, so a misspelt key fails when the record is
    built or read rather than reading as None (a new diagnostic is a new field)."""

    model_config = ConfigDict(extra="forbid")
