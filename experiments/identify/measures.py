"""identify's outcomes of a direction, each declared once as an ``Outcome``
(``kernel/outcomes.py``, the declaration Phase 5's outcomes of a text share).

``likelihood`` (declared in ``kernel/outcomes.py``, which Phase 5 shares) is the primary
outcome, measured on every direction (its column ``effect``): the estimands, their
split-half reliabilities and the pre-registered primary read it (``Estimator.PRIMARY``);
a pre-registration's ``outcome:`` names a declaration that says so, and the primary
reads that declaration's column. ``rubric`` is the AxBench rubric (``steer-eval panel
--rubric axbench``): a judge panel's rating of each steered text less its unsteered
twin's, read for its reliability and its agreement with the likelihood at s = +1
(``estimation/rubric.py``). The others are how a direction steers, measured another
way on the stratified subset:

A declaration names its ``directions.csv`` column and how that column is read from the
stages' :class:`~experiments.identify.pipeline.Outcomes` (``values``), which estimators
read it (``Estimator.SLOPE`` on its detection columns, ``GIVEN_DOSE`` beside the dose,
``AGREEMENT`` with the outcome it should agree with), and the words that show it. From
it alone:

* the column is written to the directions table (:func:`outcome_columns`);
* the subset's analysis takes each slope (``subset_analysis.subset_outcomes``) into the
  record's ``identified.subset.outcomes[<key>]`` (:class:`experiments.record.OutcomeSlopes`);
* the summary says it (``summary.subset_lines``), the answer lists its headline slope
  (``identified/subset/<key>``) and the parent run logs every slope
  (``subset/<key>/<detector>``).

A new subset outcome is then the stage that measures it (a field of ``Outcomes``) and
one ``OUTCOMES.register`` here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np
import pandas as pd

from experiments.kernel.outcomes import LIKELIHOOD as LIKELIHOOD_OUTCOME
from experiments.kernel.outcomes import Estimator, Outcome
from steering.registry import Registry

if TYPE_CHECKING:
    from experiments.identify.pipeline import Outcomes

Key = tuple[str, str]  # (concept, direction id)

# How the summary names a detection column when a slope is taken on more than one.
DETECTOR_WORDS = {"auroc": "the named AUROC", "auroc_name_free": "the name-free AUROC"}


# A direction's outcome (kernel/outcomes.Outcome), read from the stages' outputs
DirectionOutcome = Outcome["Outcomes", dict[Key, float]]
# The slope on detection, beside the dose, and the agreement with another outcome
SLOPES = frozenset({Estimator.SLOPE})
ALL_READINGS = frozenset({Estimator.SLOPE, Estimator.GIVEN_DOSE, Estimator.AGREEMENT})


OUTCOMES: Registry[DirectionOutcome] = Registry("identify outcome")
LIKELIHOOD: DirectionOutcome = OUTCOMES.register("likelihood", LIKELIHOOD_OUTCOME)
RUBRIC = OUTCOMES.register(
    "rubric",
    DirectionOutcome(
        "AxBench rubric (a judge panel's hm of each steered text less its unsteered twin's)",
        estimators=frozenset({Estimator.RELIABILITY, Estimator.AGREEMENT}),
        column="hm_effect",
        agrees_with="effect_at_1",  # the likelihood outcome at s = +1 (directions.csv)
    ),
)


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
    DirectionOutcome(
        "Name-free outcome on the subset (likelihood texts naming only what falls under "
        "the concept)",
        values=_name_free,
        estimators=SLOPES,
        answer="(name-free) on the name-free likelihood outcome",
        column="effect_name_free",
        detectors=("auroc", "auroc_name_free"),
    ),
)
OUTCOMES.register(
    "generated",
    DirectionOutcome(
        "Generated outcome on the subset (every direction, Δ gated)",
        values=_generated,
        estimators=ALL_READINGS,
        answer="on the generated outcome (Δ gated)",
        column="gen_effect",
        agrees_with="effect",
    ),
)


def outcome_columns(frame: pd.DataFrame, outcomes: Outcomes) -> None:
    """Every declared outcome the stages measured, as its column of the directions table
    (in place; NaN where a direction has none). The study calls it when it has a subset:
    the validating generations of every concept are the cross-check's, not an outcome."""
    key = list(zip(frame["concept"], frame["direction"], strict=True))
    for measure in OUTCOMES.values():
        at = measure.values(outcomes) if measure.values is not None else None
        if at:
            frame[measure.column] = [at.get(k, np.nan) for k in key]
