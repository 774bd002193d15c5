"""Providers register themselves (`@judge_provider`); SDKs are imported only on use."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

import pytest

from judges import (
    Budget,
    Judge,
    JudgeUnavailable,
    Rating,
    RatingRequest,
    build_panel,
    get_judge,
    registry,
)
from judges.registry import judge_provider, parse_name, provider_info, providers

SDKS = ("anthropic", "openai", "llama_cpp")


def test_builtin_providers_are_listed():
    assert {"anthropic", "openai", "llama"} <= set(providers())
    assert provider_info("llama").local and not provider_info("openai").local
    assert not provider_info("anthropic").local


def test_importing_judges_and_listing_providers_imports_no_sdk():
    """Run in a fresh interpreter: this test process has the SDKs loaded already."""
    code = (
        "import json, sys\n"
        "import judges\n"
        "from judges.registry import providers, provider_info\n"
        "names = providers()\n"
        "infos = [provider_info(n).name for n in names]  # imports every provider module\n"
        "import judges.anthropic, judges.openai, judges.llama, judges.pricing\n"
        f"print(json.dumps({{'names': infos, 'loaded': [m for m in {SDKS!r} if m in sys.modules],"
        " 'genai_prices': 'genai_prices' in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"anthropic", "openai", "llama"} <= set(report["names"])
    assert report["loaded"] == []
    assert report["genai_prices"] is False  # the price table loads on the first lookup


def test_unknown_provider_lists_the_registered_ones():
    with pytest.raises(ValueError, match="unknown judge provider 'gemini'") as info:
        get_judge("gemini/pro")
    for name in ("anthropic", "openai", "llama"):
        assert name in str(info.value)
    with pytest.raises(ValueError, match="unknown judge provider 'gemini'") as info:
        provider_info("gemini")
    for name in ("anthropic", "openai", "llama"):
        assert name in str(info.value)


class EchoJudge(Judge):
    """A provider defined outside judges/, to show third-party registration."""

    provider = "echo"

    def __init__(self, model: str, score: float = 0.0, budget: Budget | None = None) -> None:
        super().__init__(f"echo/{model}", model)
        self.score, self.budget = score, budget

    def _rate_batch(self, requests: Sequence[RatingRequest], on_result) -> list[Rating]:
        return [Rating(score=self.score, raw=str(self.score)) for _ in requests]


@pytest.fixture
def echo_provider():
    @judge_provider("echo")
    def make_echo(model: str = "", **options) -> EchoJudge:
        return EchoJudge(model or "default", **options)

    @judge_provider("echo-local", local=True)
    def make_local(model: str = "", **options) -> EchoJudge:
        return EchoJudge(model or "default", **options)

    yield make_echo
    registry._REGISTRY.pop("echo", None)
    registry._REGISTRY.pop("echo-local", None)


def test_a_registered_provider_builds_and_joins_a_panel(echo_provider):
    assert "echo" in providers() and parse_name("Echo/x") == ("echo", "x")
    judge = get_judge("echo/m1", score=3.0)
    assert isinstance(judge, EchoJudge) and judge.name == "echo/m1"
    assert judge.rate_one("t", "dog").score == 3.0
    assert get_judge("echo", score=1.0).model == "default"
    judges, skipped = build_panel(
        ["echo/a", "echo-local/b"], options={"echo/a": {"score": 1.0}}, budget_usd=2.0, score=5.0
    )
    assert not skipped
    api, local = judges
    # API providers get the common options and the shared budget; local ones neither.
    assert api.score == 1.0 and api.budget is not None and api.budget.cap_usd == 2.0
    assert local.score == 0.0 and local.budget is None


def test_a_name_cannot_be_taken_twice(echo_provider):
    with pytest.raises(ValueError, match="already registered"):

        @judge_provider("echo")
        def other(model: str = "", **options) -> EchoJudge:  # pragma: no cover - never runs
            return EchoJudge(model)

    assert provider_info("echo").factory is echo_provider


@pytest.mark.parametrize("bad", ["", "a/b", "  "])
def test_invalid_provider_names_are_refused(bad):
    with pytest.raises(ValueError, match="invalid provider name"):
        judge_provider(bad)


@pytest.mark.parametrize(
    ("name", "module", "package"),
    [
        ("anthropic/claude-sonnet-4-5", "anthropic", "pip install anthropic"),
        ("openai/gpt-4o-mini", "openai", "pip install openai"),
    ],
)
def test_missing_sdk_is_unavailable_and_names_the_package(
    api_keys, monkeypatch, name, module, package
):
    monkeypatch.setitem(sys.modules, module, None)  # `import <module>` now fails
    with pytest.raises(JudgeUnavailable, match=package):
        get_judge(name, cache=False)
    judges, skipped = build_panel([name], cache=False)
    assert judges == [] and package in skipped[name]


def test_missing_llama_cpp_is_unavailable_and_says_how_to_install(monkeypatch, tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(JudgeUnavailable) as info:
        get_judge(f"llama/{gguf}", cache=False)
    assert "make setup-judge" in str(info.value)
    assert "pip install llama-cpp-python" in str(info.value)
