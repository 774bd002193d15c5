"""Outcomes, declared once for every phase: what a unit of a study is steered by, read
one way (the declaration ``Outcome``; a phase keeps its own ``Registry[Outcome]``).

An outcome is a number per unit: Phase 5's units are steered texts, each read against
its unsteered twin (the signed effect ``e``, the same after the coherence gate
``e_gated``, the effect and fluency together ``combined``; registered below), identify's
are directions (``identify/measures.py``: the generated outcome, the name-free one). A
declaration says how its unit values are read from the stage outputs (``values``; for a
text's outcome, by default the paired rows' column of its name), which estimators read
it (``estimators``), whether the coherence gate applies, its words, and for a direction's
outcome its directions-table column, the detection columns its slope is on and the
outcome it should agree with. From it alone:

* a text's outcome (``Estimator.MEAN``): ``kernel.effect`` takes its mean with the
  concept-level bootstrap per arm and sign into the record's
  ``statistics.effect['<arm>/<sign>'].outcomes[<name>]``
  (:class:`experiments.record.ArmEffect`), the parent run logs
  ``effect/<arm>/<sign>/<name>_mean`` (``_low``, ``_high``), the summary's effect table has
  its column and, with ``answer`` words, ``answer.md`` lists the concept arm's value per
  sign as a reference row, read against ``criteria.effect_min``;
* a direction's outcome (``Estimator.SLOPE``, ``GIVEN_DOSE``, ``AGREEMENT``,
  ``RELIABILITY``, and ``PRIMARY`` for the likelihood outcome the estimands and the
  pre-registration read): see ``identify/measures.py``.

A new outcome is then one ``register`` (the toys of
``tests/experiments/{phase5,identify}/test_toy_outcome.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, Literal, TypeVar

import pandas as pd

from steering.registry import Registry


class Estimator(StrEnum):
    """What reads an outcome."""

    MEAN = "mean"  # its mean per arm and sign, concepts resampled (a text's outcome)
    SLOPE = "slope"  # its within-concept slope on each detection column (a direction's)
    GIVEN_DOSE = "given_dose"  # that slope beside log next-token KL (the dose)
    AGREEMENT = "agreement"  # its within-concept r with the outcome it should agree with
    # identify's primary outcome, on every direction: the estimands, their split-half
    # reliabilities and the pre-registered primary (which names it by its key)
    PRIMARY = "primary"
    RELIABILITY = "reliability"  # its within-concept split-half reliability


S = TypeVar("S")  # the stage output its unit values are read from
V = TypeVar("V")  # the unit values: a column of paired rows, or a value per direction


@dataclass(frozen=True)
class Outcome(Generic[S, V]):
    """One outcome of a unit (see the module's docstring)."""

    label: str  # its words: the summary's column header, or its subset line's opening
    values: Callable[[S], V] | None = None  # from the stage outputs; None: the paired
    # rows' column of the outcome's name
    estimators: frozenset[Estimator] = frozenset({Estimator.MEAN})
    gated: bool = False  # after the coherence gate: not evaluable where every text failed
    shown: Literal["interval", "mean"] = "interval"  # the summary's cell
    answer: str | None = None  # the answer's row: a text's reference row (concept arm,
    # per sign), a direction's words after "slope on AUROC"
    column: str = ""  # a direction's outcome: its directions.csv column
    detectors: tuple[str, ...] = ("auroc",)  # the detection columns its slope is on; the
    # last is the answer's headline
    agrees_with: str | None = None  # a column it should rank directions alike with

    def __post_init__(self) -> None:
        """A declaration that an estimator cannot read is refused when it is made."""
        if Estimator.AGREEMENT in self.estimators and self.agrees_with is None:
            raise ValueError(f"outcome {self.label!r}: AGREEMENT needs agrees_with")
        if self.estimators - {Estimator.MEAN} and not self.column:
            raise ValueError(f"outcome {self.label!r}: a direction's estimator needs its column")


# The likelihood outcome of a direction (steering/likelihood.py, Pres et al. 2024),
# declared once for both phases: Phase 5 measures it on every concept's directions and
# nulls (phase5/likelihood.py; its table in the summary under these words), identify
# registers it as its primary outcome (identify/measures.py). Read by its column in
# every phase, it has no ``values`` and so no stage type.
LIKELIHOOD: Outcome[Any, Any] = Outcome(
    "Likelihood outcome e = s·((L_s − L_0)(on) − (L_s − L_0)(off)), nats per token",
    estimators=frozenset({Estimator.PRIMARY, Estimator.RELIABILITY}),
    column="effect",
)

# A steered text's outcome, read from paired_effects' rows
TextOutcome = Outcome[pd.DataFrame, pd.Series]
OUTCOMES: Registry[TextOutcome] = Registry("Phase 5 outcome")
OUTCOMES.register("e", TextOutcome("e (ungated)"))
OUTCOMES.register("e_gated", TextOutcome("e (gated)", gated=True))
OUTCOMES.register("combined", TextOutcome("combined", shown="mean"))
