"""Co-primaries read together: Holm's step-down over a pre-registration's primaries.

A primary's verdict is read from its interval (``primary.read_verdict``: supported or
contradicted by the slope's sign, no practical effect inside ±margin, inconclusive), and
the interval comes from inverting a test. So a verdict read at confidence 1 − a is a test
at level a. Holm's procedure over m primaries at family-wise α then reads as intervals:

1. Read every unsettled primary at 1 − α/r, where r is how many are unsettled.
2. A primary whose verdict is not inconclusive is settled.
3. Repeat with the smaller r, until none settles or none is left.

Settling at once every primary that passes at α/r is Holm's procedure: the next
thresholds are larger, so each would be rejected in turn. Under any true slope at most
one of a primary's readings is false. "No practical effect" is two one-sided tests at the
interval's level. So each primary's false-claim rate at level a is at most a, and Holm
keeps the family's at α. statsmodels' ``multipletests`` adjusts p-values; these verdicts
come from intervals found by test inversion, hence this short loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from experiments.record import PrimaryResult, PrimarySpec
from experiments.record.pooled import PrimaryReading

# Verdicts that settle nothing: no claim, no estimate, or (the reliability floor) a
# primary the pre-registration calls uninformative whatever its interval.
UNSETTLED = ("inconclusive", "not_evaluable", "uninformative")
Score = Callable[[PrimarySpec, float], PrimaryResult]  # (spec, confidence) -> result


@dataclass(frozen=True)
class Reading:
    """One primary as Holm's procedure left it: its result read at ``confidence``, and
    the step that settled it (0: never settled, read at the last step's level)."""

    name: str
    result: PrimaryResult  # primary.primary_result at `confidence`
    confidence: float
    step: int

    @property
    def verdict(self) -> str:
        return self.result.verdict

    def recorded(self) -> PrimaryReading:
        """The reading as the pooled record keeps it."""
        return PrimaryReading.model_validate({
            "name": self.name, "verdict": self.verdict, "confidence": self.confidence,
            "holm_step": self.step, **self.result.model_dump(exclude_unset=True),
        })  # fmt: skip


def holm(specs: list[PrimarySpec], score: Score, alpha: float = 0.05) -> list[Reading]:
    """Every spec's reading by Holm's step-down at family-wise ``alpha`` (see the
    module's docstring), in the specs' order."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    readings: dict[int, Reading] = {}
    unsettled = list(range(len(specs)))
    step = 0
    while unsettled:
        step += 1
        confidence = 1 - alpha / len(unsettled)
        results = {i: score(specs[i], confidence) for i in unsettled}
        settled = [i for i in unsettled if results[i].verdict not in UNSETTLED]
        for i in unsettled:
            name = specs[i].label(f"P{i + 1}")
            readings[i] = Reading(name, results[i], confidence, step if i in settled else 0)
        if not settled:
            break
        unsettled = [i for i in unsettled if i not in settled]
    return [readings[i] for i in range(len(specs))]
