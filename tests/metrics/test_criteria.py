"""Success criteria: thresholds at their boundaries, statuses, and no NaN metric values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.criteria import (
    C4,
    V2_C4,
    CriterionResult,
    combine_criterion4,
    combine_criterion4_v2,
    direction_criterion,
    f1_criterion,
    human_criterion,
    human_criterion_v2,
    magnitude_criterion,
    panel_criterion,
    panel_criterion_v2,
)
from metrics.stats import Alpha, Correlation, NotEvaluable

PROPS = settings(derandomize=True, deadline=None, max_examples=60)


def corr(r: float) -> Correlation:
    return Correlation(r, r - 0.1, min(r + 0.1, 1.0), 50, p_value=0.01)


def assert_metric_ok(result: CriterionResult) -> None:
    value = result.metric_value()
    if result.status in {"pass", "fail"}:
        assert value in {0.0, 1.0}
    else:
        assert value is None
    assert result.value is None or math.isfinite(result.value)
    assert set(result.to_dict()) == {"key", "description", "status", "value", "threshold", "reason"}


# --- C1: direction ---------------------------------------------------------------------------


def test_direction_exactly_eighty_percent_passes():
    strengths = [1.0] * 5 + [0.0]
    shifts = [0.1, 0.2, 0.3, 0.4, -0.1, 0.0]
    result = direction_criterion(strengths, shifts)
    assert result.key == "c1_direction"
    assert result.value == 0.8 and result.status == "pass"
    assert_metric_ok(result)


def test_direction_just_below_fails_and_zero_shift_counts_as_not_moved():
    strengths = [1.0, 1.0, 1.0, 1.0, -1.0]
    shifts = [0.1, 0.1, 0.1, 0.0, -0.2]  # the zero shift did not move
    result = direction_criterion(strengths, shifts, min_fraction=0.81)
    assert result.value == pytest.approx(0.8) and result.status == "fail"
    assert result.metric_value() == 0.0


def test_direction_negative_strength_expects_negative_shift():
    assert direction_criterion([-1.0, -1.0], [-0.3, -0.1]).value == 1.0
    assert direction_criterion([-1.0, -1.0], [0.3, 0.1]).value == 0.0


def test_direction_without_steered_samples_is_not_evaluable():
    result = direction_criterion([0.0, 0.0], [0.1, -0.1])
    assert result.status == "not_evaluable" and result.value is None
    assert result.metric_value() is None
    assert direction_criterion([], []).status == "not_evaluable"
    assert direction_criterion([1.0], [float("nan")]).status == "not_evaluable"


# --- C2: magnitude ---------------------------------------------------------------------------


def test_magnitude_exactly_threshold_fails_because_strict():
    result = magnitude_criterion([1.0, -1.0, 0.0], [0.15, 0.15, 9.0])
    assert result.key == "c2_magnitude"
    assert result.value == pytest.approx(0.15) and result.status == "fail"
    passing = magnitude_criterion([1.0, -1.0], [0.16, 0.16])
    assert passing.status == "pass"
    assert_metric_ok(result)
    assert_metric_ok(passing)


def test_magnitude_missing_strengths_is_not_evaluable_and_names_them():
    result = magnitude_criterion([0.25, -0.5, 0.0], [0.4, 0.4, 0.0])
    assert result.status == "not_evaluable"
    assert "-1" in result.reason and "+1" in result.reason and "0.25" in result.reason


def test_magnitude_notes_a_one_sided_selection():
    result = magnitude_criterion([1.0, 0.5], [0.3, 9.0])
    assert result.status == "pass" and result.value == pytest.approx(0.3)
    assert "only +1" in result.reason


# --- C3: F1 vs magnitude ---------------------------------------------------------------------


def test_f1_criterion_passes_on_strong_correlation_and_skips_unmatched():
    f1 = {"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.9, "extra": 0.1}
    mag = {"a": 0.05, "b": 0.1, "c": 0.2, "d": 0.25}
    result = f1_criterion(f1, mag)
    assert result.status == "pass" and result.value > 0.5
    assert "extra" in result.reason
    assert_metric_ok(result)


def test_f1_criterion_fails_on_negative_correlation():
    result = f1_criterion({"a": 0.1, "b": 0.2, "c": 0.3}, {"a": 0.3, "b": 0.2, "c": 0.1})
    assert result.status == "fail"


def test_f1_criterion_not_evaluable_for_constant_or_few():
    constant = f1_criterion({"a": 0.8, "b": 0.8, "c": 0.8}, {"a": 0.1, "b": 0.2, "c": 0.3})
    assert constant.status == "not_evaluable" and "constant" in constant.reason
    few = f1_criterion({"a": 0.8}, {"a": 0.1})
    assert few.status == "not_evaluable" and few.metric_value() is None


# --- C4: human, panel, combined --------------------------------------------------------------


@pytest.mark.parametrize(
    ("r", "status"),
    [(0.71, "pass"), (0.7, "inconclusive"), (0.5, "inconclusive"), (0.49, "panel_required")],
)
def test_human_criterion_bands(r, status):
    result = human_criterion(corr(r))
    assert result.status == status
    assert_metric_ok(result)


def test_human_criterion_pending_and_not_evaluable():
    assert human_criterion(None).status == "pending"
    assert human_criterion(NotEvaluable("x is constant")).status == "not_evaluable"


def test_panel_criterion_thresholds():
    assert panel_criterion(0.667, 0.71).status == "pass"
    assert panel_criterion(Alpha(0.8, 3, 50), corr(0.9)).status == "pass"
    assert panel_criterion(0.666, 0.9).status == "fail"
    assert panel_criterion(0.9, 0.7).status == "fail"
    for alpha, r in [(None, 0.9), (0.9, None), (NotEvaluable("no units"), 0.9)]:
        result = panel_criterion(alpha, r)
        assert result.status == "not_evaluable" and result.metric_value() is None


def test_combine_criterion4():
    panel_pass = panel_criterion(0.8, 0.9)
    panel_fail = panel_criterion(0.1, 0.9)
    human_pass = human_criterion(corr(0.9))
    human_low = human_criterion(corr(0.3))

    assert combine_criterion4(human_pass, panel_fail).status == "pass"
    assert combine_criterion4(human_low, panel_pass).status == "pass"
    assert combine_criterion4(human_low, panel_fail).status == "fail"
    assert combine_criterion4(human_low).status == "panel_required"
    missing_panel = combine_criterion4(human_low, panel_criterion(None, None))
    assert missing_panel.status == "panel_required"
    assert combine_criterion4(human_criterion(None)).status == "pending"
    assert combine_criterion4(human_low, panel_pass).key == C4


def interval(r: float, low: float, high: float) -> Correlation:
    return Correlation(r, low, high, 50, 10, "cluster bootstrap", p_value=0.01)


@pytest.mark.parametrize(
    ("low", "high", "status"),
    [(0.71, 0.9, "pass"), (0.69, 0.9, "inconclusive"), (0.3, 0.69, "fail")],
)
def test_human_criterion_v2_decides_on_the_interval(low, high, status):
    result = human_criterion_v2(interval(0.75, low, high))
    assert result.status == status
    assert "cluster bootstrap" in result.reason
    assert human_criterion_v2(None).status == "pending"
    assert human_criterion_v2(NotEvaluable("constant")).status == "not_evaluable"


def test_seed_and_v2_can_disagree_on_the_same_correlation():
    wide = interval(0.75, 0.4, 0.9)  # the point passes the seed's bar, the interval does not
    assert human_criterion(wide).status == "pass"
    assert human_criterion_v2(wide).status == "inconclusive"


def test_panel_criterion_v2():
    assert panel_criterion_v2(0.8, interval(0.85, 0.72, 0.95)).status == "pass"
    assert panel_criterion_v2(0.8, interval(0.85, 0.6, 0.95)).status == "inconclusive"
    assert panel_criterion_v2(0.5, interval(0.85, 0.72, 0.95)).status == "fail"  # alpha
    assert panel_criterion_v2(0.8, interval(0.5, 0.3, 0.65)).status == "fail"
    assert panel_criterion_v2(None, interval(0.85, 0.72, 0.95)).status == "not_evaluable"
    assert panel_criterion_v2(0.8, NotEvaluable("n")).status == "not_evaluable"


def test_combine_criterion4_v2_is_an_or_on_verdicts():
    human = {s: CriterionResult("h", "d", s, 0.5, 0.7, s) for s in ("pass", "fail", "inconclusive")}
    panel = {s: CriterionResult("p", "d", s, 0.5, 0.7, s) for s in ("pass", "fail", "inconclusive")}
    assert combine_criterion4_v2(human["fail"], panel["pass"]).status == "pass"
    assert combine_criterion4_v2(human["inconclusive"], panel["fail"]).status == "inconclusive"
    assert combine_criterion4_v2(human["fail"], panel["fail"]).status == "fail"
    assert combine_criterion4_v2(human["fail"]).status == "fail"
    assert combine_criterion4_v2(human_criterion_v2(None)).status == "pending"
    assert combine_criterion4_v2(human["pass"]).key == V2_C4


def test_criterion_result_rejects_nan_and_unknown_status():
    with pytest.raises(ValueError):
        CriterionResult("k", "d", "pass", float("nan"), 0.5, "r")
    with pytest.raises(ValueError):
        CriterionResult("k", "d", "maybe", None, 0.5, "r")  # type: ignore[arg-type]


# --- no criterion ever yields NaN --------------------------------------------------------------

maybe_nan = st.one_of(st.floats(-2, 2, allow_nan=False), st.just(float("nan")))
strength = st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0])


@PROPS
@given(st.lists(st.tuples(strength, maybe_nan), max_size=12))
def test_sample_criteria_never_yield_nan(rows):
    strengths = [s for s, _ in rows]
    shifts = [d for _, d in rows]
    for result in (
        direction_criterion(strengths, shifts),
        magnitude_criterion(strengths, list(np.abs(shifts))),
    ):
        assert_metric_ok(result)


@PROPS
@given(
    st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 1), max_size=6),
    st.dictionaries(st.sampled_from("abcdef"), maybe_nan, max_size=6),
    st.one_of(st.none(), st.floats(-1, 1)),
    st.one_of(st.none(), maybe_nan),
)
def test_concept_and_rater_criteria_never_yield_nan(f1, mag, human_r, alpha):
    human = human_criterion(None if human_r is None else corr(human_r))
    panel = panel_criterion(alpha, human_r)
    for result in (f1_criterion(f1, mag), human, panel, combine_criterion4(human, panel)):
        assert_metric_ok(result)
