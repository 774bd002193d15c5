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
    # a steered text's outcomes are read by their mean; a direction's: the likelihood by
    # the estimands and the primary, the rubric by its reliability and agreement, the
    # subset's by slopes
    assert {o.estimators for o in TEXT_OUTCOMES.values()} == {frozenset({Estimator.MEAN})}
    likelihood, rubric = DIRECTION_OUTCOMES["likelihood"], DIRECTION_OUTCOMES["rubric"]
    assert Estimator.PRIMARY in likelihood.estimators and likelihood.column == "effect"
    assert rubric.estimators == {Estimator.RELIABILITY, Estimator.AGREEMENT}
    assert rubric.agrees_with == "effect_at_1"
    subset = [o for k, o in DIRECTION_OUTCOMES.items() if k not in ("likelihood", "rubric")]
    assert subset and all(Estimator.SLOPE in o.estimators for o in subset)
    generated = DIRECTION_OUTCOMES["generated"]
    assert Estimator.AGREEMENT in generated.estimators and generated.agrees_with == "effect"


def test_the_primary_reads_the_column_of_the_outcome_its_preregistration_names():
    """A toy declared for the estimands (twice the likelihood outcome) is an outcome a
    pre-registration may name, and the primary's slope on it is twice the likelihood's."""
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.primary import primary_result
    from experiments.identify.heldout.prereg import PreregistrationError, _check_primary
    from experiments.identify.simulation.simulate import toy_study
    from experiments.record import PrimarySpec

    spec = PrimarySpec(predictor="auroc", outcome="toy_twice", strength=1.0, control="cos_ref",
                       hypothesis="positive", rule="r")  # fmt: skip
    with pytest.raises(PreregistrationError, match="'toy_twice' is not one"):
        _check_primary(spec)
    frame = toy_study(3, "linear")
    tables = StudyTables(directions=frame.assign(toy_twice=2 * frame["effect"]))
    DIRECTION_OUTCOMES.register(
        "toy_twice",
        Outcome("Toy (twice the likelihood)", estimators=frozenset({Estimator.PRIMARY}),
                column="toy_twice"),
    )  # fmt: skip
    try:
        assert _check_primary(spec) is spec
        toy = primary_result(tables, spec, n_boot=99, seed=0)
    finally:
        DIRECTION_OUTCOMES.pop("toy_twice")
    likelihood = primary_result(tables, spec.model_copy(update={"outcome": "likelihood"}), 99, 0)
    assert toy.slope.estimate == pytest.approx(2 * (likelihood.slope.estimate or 0), rel=1e-9)


def test_a_declaration_an_estimator_cannot_read_is_refused():
    with pytest.raises(ValueError, match="AGREEMENT needs agrees_with"):
        Outcome("toy", estimators=frozenset({Estimator.AGREEMENT}), column="toy")
    with pytest.raises(ValueError, match="a direction's estimator needs its column"):
        Outcome("toy", estimators=frozenset({Estimator.SLOPE}))
