"""`get_judge("provider/name", **options)`: the single way to build a judge.

Names: "anthropic/<model>" (or just "anthropic" for the default Sonnet),
"openai/<model>" (default gpt-4o-mini; pass base_url=... for a compatible server),
"llama/embedded" (the suite's Gemma 3 270M GGUF) and "llama/<path.gguf>".
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from judges.base import Budget, Judge, JudgeUnavailable

log = logging.getLogger(__name__)

PROVIDERS = ("anthropic", "openai", "llama")


def parse_name(name: str) -> tuple[str, str]:
    """Split "provider/rest" once: a GGUF path may itself contain slashes."""
    provider, _, rest = name.strip().partition("/")
    provider = provider.lower()
    if provider not in PROVIDERS:
        raise ValueError(f"Unknown judge provider in {name!r}; expected one of {PROVIDERS}.")
    return provider, rest


def get_judge(name: str, **options: Any) -> Judge:
    """Build a judge by name. Raises JudgeUnavailable when it cannot run here (no key etc.)."""
    provider, rest = parse_name(name)
    if provider == "anthropic":
        from judges.anthropic import DEFAULT_MODEL, AnthropicJudge

        return AnthropicJudge(rest or DEFAULT_MODEL, **options)
    if provider == "openai":
        from judges.openai import DEFAULT_MODEL, OpenAIJudge

        return OpenAIJudge(rest or DEFAULT_MODEL, **options)
    from judges.llama import LlamaJudge

    return LlamaJudge(rest or "embedded", **options)


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
        provider, _ = parse_name(name)
        kwargs: dict[str, Any] = dict(options.get(name, {})) if options else {}
        if provider in ("anthropic", "openai"):
            kwargs = {**common, **kwargs}
            kwargs.setdefault("budget", budget)
        try:
            judges.append(get_judge(name, **kwargs))
        except JudgeUnavailable as exc:
            skipped[name] = str(exc)
            log.warning("Skipping judge %s: %s", name, exc)
    return judges, skipped
