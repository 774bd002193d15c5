"""What a judge call costs, from the maintained `genai-prices` table (pydantic/genai-prices).

A judge's price is one of three kinds, never confused with each other:
- "table": the model is in the price data bundled with the installed genai-prices, for the
  judge's provider; a call's cost is `calc_price(usage)` (tier-aware: a long prompt can
  cross a price tier), input and output tokens each at their own rate;
- "explicit": `price_per_mtok=(input, output)` USD per 1M tokens, given by the user for a
  model the table lacks (a fine-tune, a model served by vLLM);
- "local": a judge that runs on this machine (llama) costs exactly 0 - known, not unknown.
A model that is none of these has price None: its cost is None ("unknown"), never 0 and
never guessed, and a judge with a budget cap refuses to run it (see `judges.api`).

Lookups are offline: only the data bundled with the installed package is used (genai-prices'
`UpdatePrices`, which fetches from GitHub, is never started). Upgrade the package to
refresh prices; `table_source()` names the version, and it is logged with every judge.

AxBench priced output tokens using the input count; here input and output are priced
separately from the usage fields the API returns.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from functools import cache
from typing import Literal

log = logging.getLogger(__name__)

PriceKind = Literal["table", "explicit", "local"]

_warned: set[str] = set()
_warn_lock = threading.Lock()


@cache
def table_source() -> str:
    """ "genai-prices <version>": where table prices come from (goes into MLflow params)."""
    from importlib.metadata import version

    return f"genai-prices {version('genai-prices')}"


@dataclass(frozen=True)
class Price:
    """How one model's calls are priced. Per-1M-token rates are the base (lowest-tier)
    rates, for display; `cost()` is the real computation."""

    kind: PriceKind
    input_per_mtok: float
    output_per_mtok: float
    model_ref: str = ""  # table prices only: the model id genai-prices matched
    provider_id: str = ""  # table prices only
    source: str = ""

    @property
    def per_mtok(self) -> tuple[float, float]:
        return (self.input_per_mtok, self.output_per_mtok)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """USD for one call: input tokens at the input rate, output at the output rate."""
        if self.kind == "table":
            from genai_prices import Usage, calc_price

            calc = calc_price(
                Usage(input_tokens=int(input_tokens), output_tokens=int(output_tokens)),
                self.model_ref,
                provider_id=self.provider_id,
            )
            return float(calc.total_price)
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


LOCAL = Price("local", 0.0, 0.0, source="local (runs on this machine)")


def explicit(input_per_mtok: float, output_per_mtok: float) -> Price:
    """A user-given price, USD per 1M input / output tokens."""
    if input_per_mtok < 0 or output_per_mtok < 0:
        raise ValueError("prices must be >= 0")
    return Price("explicit", float(input_per_mtok), float(output_per_mtok), source="price_per_mtok")


def as_price(price: Price | tuple[float, float] | None) -> Price | None:
    """Accept a Price, an (input, output) USD-per-1M pair, or None (unknown)."""
    if price is None or isinstance(price, Price):
        return price
    return explicit(*price)


def lookup(model: str, provider: str | None = None) -> Price | None:
    """The table price of `model` at `provider` ("anthropic", "openai"), or None.

    With a provider, only that provider's models match, so a locally served
    "gemma-3-270m" behind the OpenAI judge is unknown rather than priced as Google's.
    Dated snapshots ("gpt-4o-mini-2024-07-18") match their model, as genai-prices defines.
    """
    if not model:
        return None
    from genai_prices import Usage, calc_price

    try:
        # Rates for 1000 tokens each way (below any tier), scaled to per-1M for display.
        calc_in = calc_price(Usage(input_tokens=1000, output_tokens=0), model, provider_id=provider)
        calc_out = calc_price(
            Usage(input_tokens=0, output_tokens=1000), model, provider_id=provider
        )
    except LookupError:
        return None
    return Price(
        "table",
        float(calc_in.input_price) * 1000,
        float(calc_out.output_price) * 1000,
        model_ref=calc_in.model.id,
        provider_id=calc_in.provider.id,
        source=table_source(),
    )


def warn_unknown(model: str) -> None:
    """Log once per model that its cost cannot be computed."""
    with _warn_lock:
        if model in _warned:
            return
        _warned.add(model)
    log.warning(
        "No price for model %r in %s: its cost is reported as None (unknown), not guessed. "
        "Pass price_per_mtok=(input, output) to the judge to set one.",
        model,
        table_source(),
    )


def cost_usd(
    input_tokens: int,
    output_tokens: int,
    price: Price | tuple[float, float] | None,
) -> float | None:
    """Dollar cost of one call; None when the price is unknown."""
    price = as_price(price)
    return None if price is None else price.cost(input_tokens, output_tokens)


# Message framing (role markers, system block) that usage counts but the text lacks.
PROMPT_OVERHEAD_TOKENS = 64
# English prose averages about 4 characters per token in the GPT and Claude tokenizers:
# a typical figure for dry runs, never used for the budget (which needs a bound).
CHARS_PER_TOKEN = 4


def typical_tokens(text: str) -> int:
    """A typical (not worst-case) token count for a prompt: chars / 4 plus framing."""
    return -(-len(text) // CHARS_PER_TOKEN) + PROMPT_OVERHEAD_TOKENS


def estimate_max_cost(
    prompt_bytes: int,
    max_output_tokens: int,
    price: Price | tuple[float, float] | None,
    overhead_tokens: int = PROMPT_OVERHEAD_TOKENS,
) -> float | None:
    """A conservative upper bound on one call's cost, for the budget check and dry runs.

    Input tokens are bounded by the prompt's UTF-8 byte count (BPE tokens are at least one
    byte of text) plus a fixed overhead for message framing; output tokens by max_tokens.
    """
    return cost_usd(prompt_bytes + overhead_tokens, max_output_tokens, price)


def describe(price: Price | None) -> dict[str, str]:
    """MLflow-safe strings; an unknown price shows as "unknown", never 0."""
    if price is None:
        return dict.fromkeys(("price_in_per_mtok", "price_out_per_mtok", "price_source"), "unknown")
    return {
        "price_in_per_mtok": f"{price.input_per_mtok:g}",
        "price_out_per_mtok": f"{price.output_per_mtok:g}",
        "price_source": price.source,
    }
