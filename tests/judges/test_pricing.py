"""Price table, cost from usage, and the conservative pre-call estimate."""

from __future__ import annotations

import logging
import re

import pytest

from judges import pricing


def test_table_is_dated_and_positive():
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", pricing.PRICES_AS_OF)
    assert all(i > 0 and o > 0 and o >= i for i, o in pricing.PRICES.values())


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o-mini", (0.15, 0.60)),
        ("gpt-4o-mini-2024-07-18", (0.15, 0.60)),
        ("gpt-4o", (2.50, 10.00)),
        ("claude-sonnet-4-5", (3.00, 15.00)),
        ("claude-sonnet-4-5-20250929", (3.00, 15.00)),
        ("claude-3-5-haiku-latest", (0.80, 4.00)),
    ],
)
def test_lookup_handles_dated_snapshots(model, expected):
    assert pricing.lookup(model) == expected


@pytest.mark.parametrize("model", ["gpt-4o-mini-turbo", "claude-sonnet-9", "llama-3.1-8b", ""])
def test_unknown_models_are_not_guessed(model):
    assert pricing.lookup(model) is None
    assert pricing.cost_usd(100, 10, pricing.lookup(model)) is None


def test_unknown_model_warns_once(caplog):
    caplog.set_level(logging.WARNING, logger="judges.pricing")
    pricing.warn_unknown("mystery-model-123")
    pricing.warn_unknown("mystery-model-123")
    messages = [r.getMessage() for r in caplog.records if "mystery-model-123" in r.getMessage()]
    assert len(messages) == 1 and "None" in messages[0]


def test_cost_prices_input_and_output_separately():
    # AxBench priced output tokens with the input count; here they are separate.
    assert pricing.cost_usd(1_000_000, 0, (3.0, 15.0)) == pytest.approx(3.0)
    assert pricing.cost_usd(0, 1_000_000, (3.0, 15.0)) == pytest.approx(15.0)
    assert pricing.cost_usd(1200, 30, (0.15, 0.60)) == pytest.approx(0.000198)


def test_estimate_is_an_upper_bound():
    price = (3.0, 15.0)
    prompt = "How strongly does this text relate to dog? " * 20
    size = len(prompt.encode())
    estimate = pricing.estimate_max_cost(size, 20, price)
    # any real tokenisation has at most one token per byte, and at most max_tokens out
    assert estimate >= pricing.cost_usd(size, 20, price)
    assert pricing.estimate_max_cost(size, 20, None) is None
