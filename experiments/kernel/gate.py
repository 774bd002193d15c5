"""The coherence gate: which steered texts count as steering and which as a broken model.

A steered text that is near-empty, echoes its prompt, whose perplexity under the
unsteered model exceeds a multiple of its concept's s = 0 median, whose repetition
exceeds a multiple of the unsteered texts' (a loop can be likely), or whose share of
alphabetic words falls below a fraction of the unsteered texts' (digits, codes and
markup can be likely too) is gated: its effect counts as 0 (``kernel/effect.py``), and
the samples table and traces show the reason.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.config import RunConfig
from metrics.text import alphabetic_share, repetition


def column(records: pd.DataFrame, name: str, default: object) -> pd.Series:
    return records[name] if name in records.columns else pd.Series(default, index=records.index)


def row_fluency(perplexity: pd.Series, ppl0_median: pd.Series, broken: pd.Series) -> pd.Series:
    """Fluency from 0 to 1: the concept's unsteered median perplexity over the text's own
    (capped at 1), and 0 for a broken text (near-empty or an echo of the prompt)."""
    return (ppl0_median / perplexity).clip(0, 1).fillna(0.0).where(~broken, 0.0)


def repetitions(records: pd.DataFrame) -> pd.Series:
    """Each row's repetition (``metrics.text.repetition``): the scored column, computed
    from the text where it is missing (a run scored before the measure)."""
    stored = column(records, "repetition", np.nan).astype(float)
    missing = stored.isna()
    if missing.any() and "text" in records.columns:
        stored = stored.copy()
        stored[missing] = records.loc[missing, "text"].fillna("").map(repetition)
    return stored


def repetition_limit(base: pd.DataFrame, config: RunConfig) -> float | None:
    """The repetition a text may reach: ``gate.repetition_multiple`` × the
    ``gate.repetition_quantile`` of the unsteered texts' repetition (``base``: the
    strength-0 rows); None when the rule is off or there is no unsteered text."""
    multiple = config.gate.repetition_multiple
    values = base["repetition"].dropna() if "repetition" in base else pd.Series(dtype=float)
    if multiple is None or values.empty:
        return None
    return float(multiple * values.quantile(config.gate.repetition_quantile))


def alphabetic_shares(records: pd.DataFrame) -> pd.Series:
    """Each row's share of alphabetic words (``metrics.text.alphabetic_share``), from its
    text (missing where a row has none: the non-language rule does not judge it)."""
    if "text" not in records.columns:
        return pd.Series(np.nan, index=records.index, dtype=float)
    return records["text"].map(alphabetic_share, na_action="ignore").astype(float)


def alphabetic_limit(base: pd.DataFrame, config: RunConfig) -> float | None:
    """The share of alphabetic words a text must reach: ``gate.alphabetic_multiple`` ×
    the ``gate.alphabetic_quantile`` of the unsteered texts' shares (``base``: the
    strength-0 rows); None when the rule is off or there is no unsteered text."""
    multiple = config.gate.alphabetic_multiple
    shares = alphabetic_shares(base).dropna()
    if multiple is None or shares.empty:
        return None
    return float(multiple * shares.quantile(config.gate.alphabetic_quantile))


def coherence_gate(
    rows: pd.DataFrame,
    ppl0_median: pd.Series,
    config: RunConfig,
    rep_limit: float | None,
    alpha_limit: float | None,
) -> tuple[pd.Series, pd.Series]:
    """The coherence gate of each row (pass, and why not: "" when it passed), in this
    order: near-empty, echoes the prompt, no perplexity, perplexity above
    ``gate.perplexity_multiple`` × its concept's unsteered median (``ppl0_median``),
    repetition above ``rep_limit`` (:func:`repetition_limit`), a share of alphabetic
    words (``alphabetic_share``, from the text where the column is missing) below
    ``alpha_limit`` (:func:`alphabetic_limit`; "non-language"). Δ is not read."""
    limit = config.gate.perplexity_multiple * ppl0_median
    too_perplexed = rows["perplexity"].isna() | (rows["perplexity"] > limit)
    broken = rows["near_empty"].astype(bool) | rows["is_echo"].astype(bool)
    # a rule without its limit (None) fails no row
    too_repetitive = rows["repetition"] > (np.inf if rep_limit is None else rep_limit)
    shares = (
        rows["alphabetic_share"].astype(float)
        if "alphabetic_share" in rows.columns
        else alphabetic_shares(rows)
    )
    not_language = shares < (-np.inf if alpha_limit is None else alpha_limit)  # NaN: no text
    reason = np.select(
        [
            rows["near_empty"].astype(bool),
            rows["is_echo"].astype(bool),
            rows["perplexity"].isna(),
            too_perplexed,
            too_repetitive,
            not_language,
        ],
        [
            "near-empty",
            "echoes the prompt",
            "no perplexity",
            "perplexity "
            + rows["perplexity"].round(1).astype(str)
            + " > "
            + limit.round(1).astype(str),
            "repetition "
            + rows["repetition"].round(1).astype(str)
            + f" > {rep_limit if rep_limit is not None else 0:.1f}",
            "non-language: alphabetic words "
            + shares.round(3).astype(str)
            + f" < {alpha_limit if alpha_limit is not None else 0:.3f}",
        ],
        default="",
    )
    passed = ~(broken | too_perplexed | too_repetitive | not_language)
    return passed, pd.Series(reason, index=rows.index)
