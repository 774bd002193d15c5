"""`get_judge("provider/name", **options)`: the single way to build a judge.

Providers register themselves next to their code (in the style of Inspect AI's model
providers): a provider module decorates a factory with `@judge_provider("name")`. The
built-in providers are discovered lazily through `BUILTIN_PROVIDERS` (name -> module), so
importing `judges` imports no provider module, and a provider module imports its SDK only
when a judge is built: listing providers never pulls in `anthropic`, `openai` or
`llama_cpp`.

Names: "anthropic/<model>" (or just "anthropic" for the default Sonnet),
"openai/<model>" (default gpt-4o-mini; pass base_url=... for a compatible server),
"llama/embedded" (the suite's Gemma 3 270M GGUF) and "llama/<path.gguf>".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from judges.base import Budget, Judge, JudgeUnavailable
from steering.registry import Registry

log = logging.getLogger(__name__)

# name -> module that registers it on import; imported on first use only.
BUILTIN_PROVIDERS: dict[str, str] = {
    "anthropic": "judges.anthropic",
    "openai": "judges.openai",
    "llama": "judges.llama",
}

JudgeFactory = Callable[..., Judge]
F = TypeVar("F", bound=JudgeFactory)


@dataclass(frozen=True)
class ProviderInfo:
    """A registered provider: `factory(rest, **options)` builds a judge for "name/rest".

    `local` judges run on this machine: they get neither the panel's shared budget nor
    the options meant for API judges, and cost exactly 0.
    """

    name: str
    factory: JudgeFactory
    local: bool = False


# The providers; a built-in one is registered when its module is first looked up.
_REGISTRY: Registry[JudgeFactory] = Registry("judge provider", lazy=BUILTIN_PROVIDERS)


def judge_provider(name: str, *, local: bool = False) -> Callable[[F], F]:
    """Register `factory(rest: str, **options) -> Judge` as provider `name`.

    `rest` is everything after the first "/" of the judge name ("" when absent). The
    factory must import its SDK lazily and raise JudgeUnavailable when it is missing. A
    factory that raises MissingKey (its key is not in the environment) must also accept
    `estimate_only=True` and then build a judge that can `estimate` but refuses to rate:
    the dry run (`judges.estimate`) prices such a judge without its key.
    """
    key = name.strip().lower()
    if not key or "/" in key:
        raise ValueError(f"invalid provider name {name!r}")
    return _REGISTRY.register(key, local=local)


def providers() -> tuple[str, ...]:
    """Names of every provider: the built-in ones and any registered by other code."""
    return tuple(sorted(_REGISTRY))


def provider_info(name: str) -> ProviderInfo:
    """The registered provider `name`; ValueError listing the known ones otherwise."""
    entry = _REGISTRY.entry(name.strip().lower())
    return ProviderInfo(entry.name, entry.value, entry.metadata["local"])


def parse_name(name: str) -> tuple[str, str]:
    """Split "provider/rest" once: a GGUF path may itself contain slashes."""
    provider, _, rest = name.strip().partition("/")
    provider = provider.lower()
    if provider not in _REGISTRY:
        raise _REGISTRY.unknown(provider)
    return provider, rest


def get_judge(name: str, **options: Any) -> Judge:
    """Build a judge by name. Raises JudgeUnavailable when it cannot run here (no key,
    SDK not installed, model file missing)."""
    provider, rest = parse_name(name)
    return provider_info(provider).factory(rest, **options)


def judge_options(
    name: str,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    budget: Budget | None = None,
    **common: Any,
) -> dict[str, Any]:
    """The options `build_panel` builds judge `name` with: `options[name]` over `common`
    and the shared `budget` for an API judge; `options[name]` alone for a local one."""
    provider, _ = parse_name(name)
    kwargs: dict[str, Any] = dict(options.get(name, {})) if options else {}
    if not provider_info(provider).local:
        kwargs = {**common, **kwargs}
        if budget is not None:
            kwargs.setdefault("budget", budget)
    return kwargs


def build_panel(
    names: Iterable[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    budget_usd: float | None = None,
    **common: Any,
) -> tuple[list[Judge], dict[str, str]]:
    """Build every judge that can run here; returns (judges, skipped {name: reason}).

    `options[name]` holds per-judge options, `common` options go to the API judges, and
    one Budget(budget_usd) is shared by all API judges so the cap covers the whole panel.
    A judge that cannot be built (missing key, package or model) is skipped with the reason
    logged; configuration mistakes (bad option values) still raise.
    """
    judges: list[Judge] = []
    skipped: dict[str, str] = {}
    budget = Budget(budget_usd)
    for name in names:
        try:
            judges.append(get_judge(name, **judge_options(name, options, budget, **common)))
        except JudgeUnavailable as exc:
            skipped[name] = str(exc)
            log.warning("Skipping judge %s: %s", name, exc)
    return judges, skipped
