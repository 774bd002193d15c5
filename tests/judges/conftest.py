"""Fixtures for the judges tests: the loopback server helper, fake keys, fast retries.

Tests run with --import-mode=importlib (no package __init__ files), so the loopback helper
is loaded by file path under a unique module name instead of relying on sys.path.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

FAKE_ANTHROPIC_KEY = "sk-ant-test-SECRET-do-not-leak-0123456789"
FAKE_OPENAI_KEY = "sk-test-SECRET-do-not-leak-9876543210"


def _load_loopback() -> ModuleType:
    name = "steer_eval_tests_judges_loopback"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("loopback.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def loopback() -> ModuleType:
    """The tests/judges/loopback.py module (LoopbackServer, ok, status, malformed, slow)."""
    return _load_loopback()


@pytest.fixture
def api_keys(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Fake keys in the environment (the only place judges read keys from)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_OPENAI_KEY)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    return {"anthropic": FAKE_ANTHROPIC_KEY, "openai": FAKE_OPENAI_KEY}


@pytest.fixture
def no_api_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def fast() -> dict[str, float]:
    """Judge options that keep retries quick: tiny backoff, short timeout."""
    return {"max_retries": 3, "base_delay": 0.01, "timeout": 2.0}


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "judge-cache"
    yield path


def embedded_gguf() -> Path:
    """The embedded GGUF; fails loudly when `make setup` has not prepared it (a broken
    setup must not pass as a skip - only a missing llama-cpp-python skips)."""
    from steering.assets import AssetError, require_embedded_gguf

    try:
        return require_embedded_gguf()
    except AssetError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def shared_llama() -> object:
    """One loaded Llama (embedded GGUF, logits_all) shared by a test module."""
    pytest.importorskip(
        "llama_cpp", reason="llama-cpp-python is not installed (pip install 'steer-eval[judge]')"
    )
    from judges.llama_runtime import LlamaCrash, check_decodes, open_llama

    path = embedded_gguf()
    try:  # a native crash fails the tests that need the model, not the whole run
        check_decodes(path)
    except LlamaCrash as exc:
        pytest.fail(str(exc))
    threads = max(1, (os.cpu_count() or 2) // 2)  # as LlamaJudge's default
    llm = open_llama(
        path,
        logits_all=True,
        n_ctx=1024,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        seed=0,
    )
    yield llm
    llm.close()


@pytest.fixture
def make_api_judge(cache_dir: Path, fast: dict[str, float]):
    """make_api_judge("anthropic" | "openai", server, **options) -> a judge on the loopback."""
    from judges import get_judge

    built = []

    def make(provider: str, server, **options):
        url = server.anthropic_url if provider == "anthropic" else server.openai_url
        kwargs = {"base_url": url, "cache": cache_dir, **fast, **options}
        judge = get_judge(options.pop("name", provider), **kwargs)
        built.append(judge)
        return judge

    yield make
    for judge in built:
        judge.close()
