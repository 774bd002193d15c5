"""experiments.bench.core.options: section choice and quick defaults."""

from __future__ import annotations

import pytest

from experiments.bench.core.options import SECTIONS, BenchOptions, parse_sections


def test_sections_option():
    assert parse_sections(None, None) == SECTIONS
    assert parse_sections("llama,batched", None) == ("batched", "llama")
    assert "e2e" not in parse_sections(None, "e2e")
    with pytest.raises(ValueError, match="unknown bench section"):
        parse_sections("batched,speed", None)


def test_quick_defaults_keep_extra_overrides():
    opts = BenchOptions.quick_defaults(overrides=["seed=3"], repeats=2)
    assert opts.quick and opts.repeats == 2
    assert opts.overrides[-1] == "seed=3" and "concepts.limit=2" in opts.overrides
