"""The one Outcome declaration (kernel/outcomes.py): each phase's outcomes are instances,
and a declaration an estimator cannot read is refused when it is made."""

from __future__ import annotations

import pytest

from experiments.identify.measures import OUTCOMES as DIRECTION_OUTCOMES
from experiments.kernel.outcomes import OUTCOMES as TEXT_OUTCOMES
from experiments.kernel.outcomes import Estimator, Outcome


def test_every_phase_declares_its_outcomes_as_one_type():
    assert all(isinstance(o, Outcome) for o in TEXT_OUTCOMES.values())
    assert all(isinstance(o, Outcome) for o in DIRECTION_OUTCOMES.values())
    # a steered text's outcomes are read by their mean, a direction's by slopes
    assert {o.estimators for o in TEXT_OUTCOMES.values()} == {frozenset({Estimator.MEAN})}
    assert all(Estimator.SLOPE in o.estimators for o in DIRECTION_OUTCOMES.values())
    generated = DIRECTION_OUTCOMES["generated"]
    assert Estimator.AGREEMENT in generated.estimators and generated.agrees_with == "effect"


def test_a_declaration_an_estimator_cannot_read_is_refused():
    with pytest.raises(ValueError, match="AGREEMENT needs agrees_with"):
        Outcome("toy", estimators=frozenset({Estimator.AGREEMENT}), column="toy")
    with pytest.raises(ValueError, match="a slope needs its directions column"):
        Outcome("toy", estimators=frozenset({Estimator.SLOPE}))
