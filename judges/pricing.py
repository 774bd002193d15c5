"""List prices for judge models, USD per 1M tokens (input, output).

PRICES_AS_OF: the providers' public list prices as known on that date (standard tier, no
batch or prompt-cache discounts). Prices change: check the providers' pricing pages before
a paid run and edit this table (and the date). An unknown model gets cost None plus a
warning - never a guess - and a judge with a budget cap refuses to run an unpriced model
unless it is given an explicit price.

AxBench priced output tokens using the input count; here input and output are priced
separately from the usage fields the API returns.
"""

from __future__ import annotations

import logging
import re
import threading

log = logging.getLogger(__name__)

PRICES_AS_OF = "2025-11-01"

# model id -> (USD per 1M input tokens, USD per 1M output tokens)
PRICES: dict[str, tuple[float, float]] = {
    # Anthropic (https://www.anthropic.com/pricing, prompts <= 200k tokens)
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-sonnet-4-0": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-opus-4-1": (15.00, 75.00),
    "claude-opus-4-0": (15.00, 75.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-haiku": (0.25, 1.25),
    # OpenAI (https://openai.com/api/pricing, standard tier)
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4o": (2.50, 10.00),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
}

# Dated snapshots ("claude-sonnet-4-5-20250929", "gpt-4o-mini-2024-07-18") and "-latest"
# aliases price like their base id. Only these suffixes are stripped: a general prefix
# match would price "gpt-4o-mini" as "gpt-4o".
_SUFFIX_RE = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")

_warned: set[str] = set()
_warn_lock = threading.Lock()


def lookup(model: str) -> tuple[float, float] | None:
    """(input, output) USD per 1M tokens for a model id, or None if not in the table."""
    if model in PRICES:
        return PRICES[model]
    base = _SUFFIX_RE.sub("", model)
    return PRICES.get(base)


def warn_unknown(model: str) -> None:
    """Log once per model that its cost cannot be computed."""
    with _warn_lock:
        if model in _warned:
            return
        _warned.add(model)
    log.warning(
        "No price for model %r in judges.pricing (prices as of %s): its cost is reported as "
        "None, not guessed. Pass price_per_mtok=(input, output) to the judge to set one.",
        model,
        PRICES_AS_OF,
    )


def cost_usd(
    input_tokens: int,
    output_tokens: int,
    price: tuple[float, float] | None,
) -> float | None:
    """Dollar cost of one call; None when the price is unknown."""
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000


def estimate_max_cost(
    prompt_bytes: int,
    max_output_tokens: int,
    price: tuple[float, float] | None,
    overhead_tokens: int = 64,
) -> float | None:
    """A conservative upper bound on one call's cost, for the budget check.

    Input tokens are bounded by the prompt's UTF-8 byte count (BPE tokens are at least one
    byte of text) plus a fixed overhead for message framing; output tokens by max_tokens.
    """
    if price is None:
        return None
    return cost_usd(prompt_bytes + overhead_tokens, max_output_tokens, price)
