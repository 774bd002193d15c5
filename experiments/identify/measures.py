"""identify's outcome measures of a direction beside the likelihood outcome, declared
once (as ``rows.Measure`` declares Phase 5's): how a direction steers, measured another
way on the stratified subset.

A declaration names its ``directions.csv`` column and how that column is read from the
stages' :class:`~experiments.identify.pipeline.Outcomes` (``values``), the detection
columns its slope is taken on, whether the slope is also taken beside the dose and
which outcome it should agree with, and the words that show it. From it alone:

* the column is written to the directions table (:func:`outcome_columns`);
* the subset's analysis takes each slope (``subset_analysis.subset_outcomes``) into the
  record's ``identified.subset.outcomes[<key>]`` (:class:`experiments.record.OutcomeSlopes`);
* the summary says it (``summary.subset_lines``), the answer lists its headline slope
  (``identified/subset/<key>``) and the parent run logs every slope
  (``subset/<key>/<detector>``).

A new outcome is then the stage that measures it (a field of ``Outcomes``) and one
``OUTCOMES.register`` here. The primary likelihood outcome (``effect``, on every
direction) is not among them: the estimands, its reliabilities and the pre-registration
read it by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd

from steering.registry import Registry

if TYPE_CHECKING:
    from experiments.identify.pipeline import Outcomes

Key = tuple[str, str]  # (concept, direction id)

# How the summary names a detection column when a slope is taken on more than one.
DETECTOR_WORDS = {"auroc": "the named AUROC", "auroc_name_free": "the name-free AUROC"}


@dataclass(frozen=True)
class OutcomeMeasure:
    """One outcome of a direction on the subset (see the module's docstring)."""

    column: str  # its directions.csv column
    values: Callable[[Outcomes], dict[Key, float]]  # per (concept, direction), from the stages
    summary: str  # the summary line's opening words
    answer: str  # the answer row's words after "slope on AUROC"
    detectors: tuple[str, ...] = ("auroc",)  # detection columns its slope is on; the last
    # is the answer's headline
    given_dose: bool = False  # its slope also beside log next-token KL (the dose)
    agrees_with: str | None = None  # a column it should rank directions alike with


OUTCOMES: Registry[OutcomeMeasure] = Registry("identify outcome measure")


def _generated(outcomes: Outcomes) -> dict[Key, float]:
    """Δ gated at s = +1 of every generated direction."""
    gen = outcomes.generated
    if not len(gen):
        return {}
    up = gen[gen["sign"] == 1].set_index(["concept", "direction"])
    return {cast(Key, k): float(v) for k, v in up["e_gen"].to_dict().items()}


def _name_free(outcomes: Outcomes) -> dict[Key, float]:
    """The likelihood outcome on name-free texts, mean over pairs at s > 0."""
    if not outcomes.name_free:
        return {}
    rows = pd.DataFrame(outcomes.name_free)
    at = rows[rows["strength"] > 0].groupby(["concept", "direction"])["e"].mean()
    return {cast(Key, k): float(v) for k, v in at.to_dict().items()}


OUTCOMES.register(
    "name_free",
    OutcomeMeasure(
        column="effect_name_free",
        values=_name_free,
        summary="Name-free outcome on the subset (likelihood texts naming only what falls "
        "under the concept)",
        answer="(name-free) on the name-free likelihood outcome",
        detectors=("auroc", "auroc_name_free"),
    ),
)
OUTCOMES.register(
    "generated",
    OutcomeMeasure(
        column="gen_effect",
        values=_generated,
        summary="Generated outcome on the subset (every direction, Δ gated)",
        answer="on the generated outcome (Δ gated)",
        given_dose=True,
        agrees_with="effect",
    ),
)


def outcome_columns(frame: pd.DataFrame, outcomes: Outcomes) -> None:
    """Every declared outcome the stages measured, as its column of the directions table
    (in place; NaN where a direction has none). The study calls it when it has a subset:
    the validating generations of every concept are the cross-check's, not an outcome."""
    key = list(zip(frame["concept"], frame["direction"], strict=True))
    for measure in OUTCOMES.values():
        at = measure.values(outcomes)
        if at:
            frame[measure.column] = [at.get(k, np.nan) for k in key]
