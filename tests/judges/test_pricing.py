"""Prices from genai-prices, cost from usage, and the conservative pre-call estimate."""

from __future__ import annotations

import logging
import re

import pytest

from judges import pricing

JUDGE_MODELS = [  # the models the panel is meant to use, by provider
    ("anthropic", "claude-sonnet-4-5"),
    ("anthropic", "claude-haiku-4-5"),
    ("openai", "gpt-4o-mini"),
    ("openai", "gpt-4o"),
    ("openai", "gpt-4.1-mini"),
]


def test_table_is_versioned_and_positive():
    assert re.fullmatch(r"genai-prices \d+\.\d+\.\d+", pricing.table_source())
    for provider, model in JUDGE_MODELS:
        price = pricing.lookup(model, provider)
        assert price is not None and price.kind == "table", model
        i, o = price.per_mtok
        assert i > 0 and o > 0 and o >= i
        assert price.source == pricing.table_source()


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        ("openai", "gpt-4o-mini", (0.15, 0.60)),
        ("openai", "gpt-4o-mini-2024-07-18", (0.15, 0.60)),
        ("openai", "gpt-4o", (2.50, 10.00)),
        ("anthropic", "claude-sonnet-4-5", (3.00, 15.00)),
        ("anthropic", "claude-sonnet-4-5-20250929", (3.00, 15.00)),
        ("anthropic", "claude-3-5-haiku-latest", (0.80, 4.00)),
        (None, "gpt-4o-mini", (0.15, 0.60)),  # provider found from the model id
    ],
)
def test_lookup_handles_dated_snapshots(provider, model, expected):
    price = pricing.lookup(model, provider)
    assert price is not None
    assert price.per_mtok == pytest.approx(expected)


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openai", "gpt-4o-mini-turbo"),
        ("anthropic", "claude-sonnet-9"),
        ("openai", "llama-3.1-8b"),
        ("openai", ""),
        (None, ""),
        ("openai", "gemma-3-270m"),  # served locally behind the OpenAI judge: not Google's
        ("anthropic", "gpt-4o"),  # another provider's model is not this provider's price
        ("no-such-provider", "gpt-4o"),
    ],
)
def test_unknown_models_are_not_guessed(provider, model):
    assert pricing.lookup(model, provider) is None
    assert pricing.cost_usd(100, 10, pricing.lookup(model, provider)) is None
    assert pricing.describe(None)["price_in_per_mtok"] == "unknown"


def test_unknown_model_warns_once(caplog):
    caplog.set_level(logging.WARNING, logger="judges.pricing")
    pricing.warn_unknown("mystery-model-123")
    pricing.warn_unknown("mystery-model-123")
    messages = [r.getMessage() for r in caplog.records if "mystery-model-123" in r.getMessage()]
    assert len(messages) == 1 and "None" in messages[0] and "genai-prices" in messages[0]


def test_cost_prices_input_and_output_separately():
    # AxBench priced output tokens with the input count; here they are separate.
    assert pricing.cost_usd(1_000_000, 0, (3.0, 15.0)) == pytest.approx(3.0)
    assert pricing.cost_usd(0, 1_000_000, (3.0, 15.0)) == pytest.approx(15.0)
    assert pricing.cost_usd(1200, 30, (0.15, 0.60)) == pytest.approx(0.000198)


@pytest.mark.parametrize(("provider", "model"), JUDGE_MODELS)
def test_table_cost_prices_output_at_the_output_rate(provider, model):
    price = pricing.lookup(model, provider)
    i, o = price.per_mtok
    assert price.cost(0, 100_000) == pytest.approx(o / 10)
    assert price.cost(100_000, 0) == pytest.approx(i / 10)
    assert price.cost(1000, 100) == pytest.approx((1000 * i + 100 * o) / 1e6)
    # the flaw this guards against: output tokens counted at the input rate
    assert price.cost(1000, 100) != pytest.approx(1100 * i / 1e6)


def test_table_cost_follows_the_price_tiers():
    """genai-prices knows Sonnet 4.5's long-prompt tier; a flat table would not."""
    price = pricing.lookup("claude-sonnet-4-5", "anthropic")
    short, long = price.cost(100_000, 0), price.cost(300_000, 0)
    assert short == pytest.approx(0.3)
    assert long > 3 * short  # past 200k input tokens every token costs more


def test_local_price_is_zero_and_known():
    assert pricing.LOCAL.kind == "local" and pricing.LOCAL.cost(10_000, 10_000) == 0.0
    assert pricing.cost_usd(10_000, 10, pricing.LOCAL) == 0.0
    assert pricing.describe(pricing.LOCAL)["price_in_per_mtok"] == "0"
    assert "local" in pricing.describe(pricing.LOCAL)["price_source"]


def test_explicit_price():
    price = pricing.explicit(0.5, 2.0)
    assert price.kind == "explicit" and price.cost(2_000_000, 1_000_000) == pytest.approx(3.0)
    assert pricing.as_price((0.5, 2.0)) == price and pricing.as_price(None) is None
    with pytest.raises(ValueError):
        pricing.explicit(-1.0, 1.0)


def test_estimate_is_an_upper_bound():
    price = (3.0, 15.0)
    prompt = "How strongly does this text relate to dog? " * 20
    size = len(prompt.encode())
    estimate = pricing.estimate_max_cost(size, 20, price)
    # any real tokenisation has at most one token per byte, and at most max_tokens out
    assert estimate >= pricing.cost_usd(size, 20, price)
    assert pricing.estimate_max_cost(size, 20, None) is None
    table = pricing.lookup("claude-sonnet-4-5", "anthropic")
    assert pricing.estimate_max_cost(size, 20, table) >= table.cost(size, 20)
