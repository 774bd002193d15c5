"""One registry type for every plugin of the suite, in the style of lm-evaluation-harness.

A :class:`Registry` maps a name to a plugin (a judge provider's factory, a direction
source, a decode policy, a phase's config model, ...). A module adds to it next to its
code, as a decorator (``@DIRECTION_SOURCES.register("diffmean")``) or as a call
(``POLICIES.register("cpu", CpuPolicy)``); the suite's own decorators
(``@direction_source``, ``@judge_provider``, ``@manipulation``) are that call.

Every registry then behaves the same way: it is a read-only mapping in registration
order; an unknown name raises :class:`UnknownName`, which names the kind, the bad name,
the closest known one and all of them; a name taken twice raises :class:`NameTaken`,
which says where both registrations come from (``module:qualname``), unless it is the
same plugin again (the same object, or the same definition re-run by a module reload);
an entry may carry metadata (a judge provider's ``local``). ``lazy`` names a module per
name that registers it when first looked up, so listing a registry imports nothing.

``steering/`` imports nothing of ours, so every package may import this module.
"""

from __future__ import annotations

import difflib
import importlib
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
V = TypeVar("V")


class UnknownName(KeyError, ValueError):
    """A name the registry does not have: a KeyError (it is a mapping) and a ValueError
    (what the suite's lookups raised before)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class NameTaken(ValueError):
    """A second plugin registered under a name already taken."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    value: T
    origin: str  # module:qualname of what was registered (or of the code registering it)
    metadata: Mapping[str, Any]


def origin_of(obj: Any, caller_depth: int = 1) -> str:
    """``module:qualname`` of a function or class; for any other object (an instance),
    ``module:line`` of the code ``caller_depth`` frames above the caller."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}:{qualname}"
    frame = sys._getframe(caller_depth + 1)
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_lineno}"


_MISSING: Any = object()


class Registry(Mapping[str, T], Generic[T]):
    """Named plugins of one kind (``kind`` is the noun of its error messages)."""

    def __init__(self, kind: str, *, lazy: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._lazy = dict(lazy or {})  # name -> module that registers it on import
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"

    # ------------------------------------------------------------------ adding

    @overload
    def register(
        self, name: str, /, *, origin: str | None = None, **metadata: Any
    ) -> Callable[[V], V]: ...

    @overload
    def register(
        self, name: str, value: V, /, *, origin: str | None = None, **metadata: Any
    ) -> V: ...

    def register(
        self, name: str, value: Any = _MISSING, /, *, origin: str | None = None, **metadata: Any
    ) -> Any:
        """Register ``value`` under ``name`` and return it; without ``value``, a decorator
        that does so. ``origin`` (default: where ``value`` is defined) names it in errors;
        ``metadata`` is kept with the entry (:meth:`metadata`)."""
        if value is not _MISSING:
            self._add(name, value, origin or origin_of(value), metadata)
            return value

        def decorator(obj: V) -> V:
            self._add(name, obj, origin or origin_of(obj), metadata)
            return obj

        return decorator

    def _add(self, name: str, value: Any, origin: str, metadata: Mapping[str, Any]) -> None:
        entry = Entry(name, value, origin, MappingProxyType(dict(metadata)))
        with self._lock:
            old = self._entries.get(name)
            if old is not None and old.value is not value and old.origin != origin:
                raise NameTaken(
                    f"{self.kind} {name!r} is already registered by {old.origin}; "
                    f"{origin} cannot register it again"
                )
            if old is not None and old.value is value and old.metadata != entry.metadata:
                raise NameTaken(f"{self.kind} {name!r} is registered again with other metadata")
            self._entries[name] = entry

    def pop(self, name: str, default: Any = _MISSING) -> Any:
        """Remove ``name`` and return its value (for tests that register a plugin)."""
        with self._lock:
            if name in self._entries:
                return self._entries.pop(name).value
        if default is _MISSING:
            raise self.unknown(name)
        return default

    # ---------------------------------------------------------------- looking up

    def entry(self, name: str) -> Entry[T]:
        if name not in self._entries and name in self._lazy:
            importlib.import_module(self._lazy[name])  # outside the lock: it registers
        found = self._entries.get(name)
        if found is None:
            raise self.unknown(name)
        return found

    def __getitem__(self, name: str) -> T:
        return self.entry(name).value

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default  # noqa: SIM401 (this is get)

    def origin(self, name: str) -> str:
        """``module:qualname`` of what was registered as ``name``."""
        return self.entry(name).origin

    def metadata(self, name: str) -> Mapping[str, Any]:
        """The metadata ``name`` was registered with (read-only)."""
        return self.entry(name).metadata

    def names(self) -> list[str]:
        """Every name in registration order; lazy names not yet imported come last."""
        with self._lock:
            return [*self._entries, *(n for n in self._lazy if n not in self._entries)]

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def unknown(self, name: str) -> UnknownName:
        """The error for a name this registry lacks: the closest name, then all of them."""
        known = sorted(self.names())
        close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        listed = ", ".join(map(repr, known)) or "(none registered)"
        return UnknownName(f"unknown {self.kind} {name!r}{hint}; use one of {listed}")
