"""Phase 5's outcomes of a steered text, declared once (as ``identify/measures.py``
declares identify's outcomes of a direction and ``rows.Measure`` the scores of a text).

An outcome is a number per steered text, read against the text's unsteered twin: the
signed effect ``e``, the same after the coherence gate (``e_gated``), the effect and
fluency together (``combined``). A declaration says how its value is read from the
paired rows of :func:`experiments.kernel.effect.paired_effects` (``values``; by default
their column of its name), whether the coherence gate applies (a gated outcome is not
evaluable where every text was gated), how the summary shows it and, for an outcome
the answer should show, its words. From it alone:

* ``kernel.effect`` takes its mean with the concept-level bootstrap per arm and sign into
  the record's ``statistics.effect['<arm>/<sign>'].outcomes[<name>]``
  (:class:`experiments.record.ArmEffect`);
* the parent run logs ``effect/<arm>/<sign>/<name>_mean`` (``_low``, ``_high``);
* the summary's effect table has its column;
* with ``answer`` words, ``answer.md`` lists the concept arm's value per sign as a
  reference row, read against ``criteria.effect_min``.

A new outcome is then one ``OUTCOMES.register`` (the toy of
``tests/experiments/phase5/test_toy_outcome.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from steering.registry import Registry


@dataclass(frozen=True)
class Outcome:
    """One outcome of a steered text (see the module's docstring)."""

    label: str  # its column header in the summary's effect table
    values: Callable[[pd.DataFrame], pd.Series] | None = None  # per paired row; None:
    # the paired rows' column of the outcome's name
    gated: bool = False  # after the coherence gate: not evaluable where every text failed
    shown: Literal["interval", "mean"] = "interval"  # the summary's cell
    answer: str | None = None  # the answer's reference row (concept arm, per sign)


OUTCOMES: Registry[Outcome] = Registry("Phase 5 outcome")
OUTCOMES.register("e", Outcome("e (ungated)"))
OUTCOMES.register("e_gated", Outcome("e (gated)", gated=True))
OUTCOMES.register("combined", Outcome("combined", shown="mean"))
