"""experiments.phase5.analyse: paired shifts, cell metrics and the success criteria, never NaN."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.config import CriteriaConfig
from experiments.phase5.analyse import (
    add_paired_shifts,
    cell_metrics,
    concept_magnitudes,
    criteria_metrics,
    criteria_thresholds,
    evaluate_criteria,
    per_strength,
    strength_label,
)
from metrics.criteria import C1_DIRECTION, C2_MAGNITUDE, C3_F1, C4_HUMAN
from metrics.stats import Correlation, NotEvaluable

PROPS = settings(derandomize=True, deadline=None, max_examples=80)
CFG = CriteriaConfig()


def rec(concept, prompt_index, sample, strength, delta, **extra):
    return {
        "concept": concept,
        "prompt_index": prompt_index,
        "sample": sample,
        "strength": float(strength),
        "delta": delta,
        **extra,
    }


def with_text_metrics(df: pd.DataFrame) -> pd.DataFrame:
    """Add the per-generation columns cell_metrics reads, with simple known values."""
    df = df.copy()
    n = len(df)
    df["core_sim"] = 0.5
    df["boundary_sim"] = 0.4
    df["neg_sim"] = 0.2
    df["concept_term_count"] = np.arange(n) % 3
    df["related_term_count"] = 1
    df["near_empty"] = False
    df["repeated_trigram_fraction"] = 0.0
    df["distinct_2"] = 0.9
    df["is_echo"] = False
    df["perplexity"] = 10.0 + np.arange(n)
    df["n_new_tokens"] = 50
    return df


@pytest.fixture
def hand_built():
    return pd.DataFrame(
        [
            rec("A", 0, 0, 0.0, 0.10),
            rec("A", 0, 0, 1.0, 0.40),
            rec("A", 0, 0, -1.0, 0.00),
            rec("A", 1, 0, 0.0, 0.20),
            rec("A", 1, 0, 1.0, 0.10),  # moved the wrong way
            rec("A", 1, 0, -1.0, 0.30),  # moved the wrong way
            rec("A", 0, 1, 0.0, 0.50),  # another sample of prompt 0: its own baseline
            rec("A", 0, 1, 1.0, 0.55),
            rec("B", 0, 0, 1.0, 0.25),
            rec("B", 0, 0, 0.0, 0.05),
            rec("C", 0, 0, 1.0, 0.50),  # no baseline
            rec("C", 0, 0, -1.0, 0.30),  # no baseline
        ]
    )


# ---------------------------------------------------------------------------- paired shifts


def test_shifts_pair_by_concept_prompt_and_sample(hand_built):
    out = add_paired_shifts(hand_built)
    assert len(out) == len(hand_built)
    assert out[["concept", "prompt_index", "sample", "strength"]].equals(
        hand_built[["concept", "prompt_index", "sample", "strength"]]
    )
    expected_shift = [0.0, 0.3, -0.1, 0.0, -0.1, 0.1, 0.0, 0.05, 0.2, 0.0, np.nan, np.nan]
    expected_base = [0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.5, 0.5, 0.05, 0.05, np.nan, np.nan]
    np.testing.assert_allclose(out["shift"], expected_shift, atol=1e-12)
    np.testing.assert_allclose(out["delta_0"], expected_base, atol=1e-12)
    np.testing.assert_allclose(out["magnitude"], np.abs(expected_shift), atol=1e-12)
    np.testing.assert_array_equal(out["direction"], np.sign(expected_shift))
    steered = out[(out["strength"] != 0) & out["shift"].notna()]
    assert steered["moved_as_expected"].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert out.loc[out["strength"] == 0, "moved_as_expected"].isna().all()


def test_add_paired_shifts_is_idempotent(hand_built):
    once = add_paired_shifts(hand_built)
    twice = add_paired_shifts(once)
    # same values (moved_as_expected is overwritten in place, so columns may reorder)
    pd.testing.assert_frame_equal(once, twice, check_like=True)


def test_rows_without_a_baseline_have_no_direction_verdict(hand_built):
    out = add_paired_shifts(hand_built)
    orphans = out[out["concept"] == "C"]
    assert orphans["shift"].isna().all()
    assert orphans["moved_as_expected"].isna().all()


def test_direction_accuracy_ignores_rows_without_a_baseline():
    records = pd.DataFrame(
        [rec("A", 0, 0, 0.0, 0.1), rec("A", 0, 0, 1.0, 0.3), rec("A", 1, 0, 1.0, 0.3)]
    )
    out = with_text_metrics(add_paired_shifts(records))
    assert cell_metrics(out[out["strength"] == 1.0])["direction_accuracy"] == 1.0


def test_rows_without_a_baseline_are_excluded_from_the_criteria(hand_built):
    out = add_paired_shifts(hand_built)
    crit = evaluate_criteria(out, {"A": 0.5, "B": 0.7, "C": 0.9}, CFG)
    c1 = crit.results[C1_DIRECTION]
    # 6 steered rows with a baseline (A: 5, B: 1); C's two orphans are left out
    assert "4/6 steered samples" in c1.reason
    assert c1.value == pytest.approx(4 / 6)
    c2 = crit.results[C2_MAGNITUDE]
    assert c2.value == pytest.approx(np.mean([0.3, 0.1, 0.1, 0.1, 0.05, 0.2]))
    assert "mean over 6 samples" in c2.reason
    # C has no magnitude, so only A and B reach the correlation (too few: not evaluable)
    assert "C" not in concept_magnitudes(out)
    assert crit.results[C3_F1].status == "not_evaluable"


# ---------------------------------------------------------------------------- labels


@pytest.mark.parametrize(
    ("strength", "label"),
    [
        (-1.0, "neg1.0"),
        (0.0, "0.0"),
        (-0.0, "0.0"),
        (0.5, "pos0.5"),
        (1, "pos1.0"),
        (-0.25, "neg0.25"),
        (2.0, "pos2.0"),
        (-1.5, "neg1.5"),
        (10.0, "pos10.0"),
    ],
)
def test_strength_label(strength, label):
    assert strength_label(strength) == label


@PROPS
@given(st.integers(-1000, 1000).map(lambda n: n / 100))
def test_strength_label_is_metric_safe_and_reversible(strength):
    label = strength_label(strength)
    assert all(ch.isalnum() or ch == "." for ch in label)
    if strength == 0:
        assert label == "0.0"
    else:
        sign = 1 if label.startswith("pos") else -1
        assert label[:3] in ("pos", "neg")
        assert sign * float(label[3:]) == strength


# ---------------------------------------------------------------------------- cell metrics


def test_cell_metrics_values(hand_built):
    out = with_text_metrics(add_paired_shifts(hand_built))
    cell = out[(out["concept"] == "A") & (out["strength"] == 1.0)]
    m = cell_metrics(cell)
    assert m["n_generations"] == 3.0
    assert m["delta_mean"] == pytest.approx(np.mean([0.40, 0.10, 0.55]))
    assert m["delta_std"] == pytest.approx(np.std([0.40, 0.10, 0.55]))
    assert m["magnitude_mean"] == pytest.approx(np.mean([0.3, 0.1, 0.05]))
    assert m["direction_accuracy"] == pytest.approx(2 / 3)
    assert m["core_sim_mean"] == pytest.approx(0.5)
    assert m["near_empty_fraction"] == 0.0
    assert m["echo_fraction"] == 0.0
    assert m["new_tokens_mean"] == 50.0
    assert m["perplexity_median"] == pytest.approx(float(cell["perplexity"].median()))


def test_cell_metrics_of_a_baseline_cell_and_a_single_row():
    out = with_text_metrics(add_paired_shifts(pd.DataFrame([rec("A", 0, 0, 0.0, 0.1)])))
    m = cell_metrics(out)
    assert m["magnitude_mean"] is None
    assert m["direction_accuracy"] is None
    assert m["delta_std"] == 0.0  # one row: a spread of zero, not NaN
    assert all(v is None or math.isfinite(v) for v in m.values())


def test_cell_metrics_without_perplexities():
    out = with_text_metrics(add_paired_shifts(pd.DataFrame([rec("A", 0, 0, 0.0, 0.1)])))
    out["perplexity"] = [None]
    assert cell_metrics(out)["perplexity_median"] is None


def test_per_strength_groups_by_strength(hand_built):
    groups = per_strength(with_text_metrics(add_paired_shifts(hand_built)))
    assert sorted(groups) == [-1.0, 0.0, 1.0]
    assert groups[1.0]["n_generations"] == 5.0
    assert groups[0.0]["n_generations"] == 4.0
    assert groups[-1.0]["n_generations"] == 3.0


# ---------------------------------------------------------------------------- criteria


def synthetic(magnitude_of, sign=1.0, concepts=("a", "b", "c", "d", "e"), prompts=3, base=0.3):
    """Records where concept c moves by ``sign * magnitude_of(c) * sign(s)`` at ±1."""
    rows = []
    for concept in concepts:
        for p in range(prompts):
            rows.append(rec(concept, p, 0, 0.0, base))
            for s in (-1.0, 1.0):
                rows.append(rec(concept, p, 0, s, base + sign * s * magnitude_of(concept)))
    return add_paired_shifts(pd.DataFrame(rows))


F1 = {"a": 0.5, "b": 0.6, "c": 0.7, "d": 0.8, "e": 0.9}


def test_all_shifts_in_the_right_direction_pass_c1():
    crit = evaluate_criteria(synthetic(lambda c: 0.2), F1, CFG)
    c1 = crit.results[C1_DIRECTION]
    assert c1.status == "pass"
    assert c1.value == 1.0
    wrong = evaluate_criteria(synthetic(lambda c: 0.2, sign=-1.0), F1, CFG)
    assert wrong.results[C1_DIRECTION].status == "fail"
    assert wrong.results[C1_DIRECTION].value == 0.0


def test_magnitude_of_point_two_at_plus_minus_one_passes_c2():
    crit = evaluate_criteria(synthetic(lambda c: 0.2), F1, CFG)
    c2 = crit.results[C2_MAGNITUDE]
    assert c2.status == "pass"
    assert c2.value == pytest.approx(0.2)
    assert c2.threshold == 0.15
    small = evaluate_criteria(synthetic(lambda c: 0.1), F1, CFG)
    assert small.results[C2_MAGNITUDE].status == "fail"
    assert small.results[C2_MAGNITUDE].value == pytest.approx(0.1)


def test_f1_perfectly_correlated_with_magnitude_passes_c3():
    crit = evaluate_criteria(synthetic(lambda c: 0.5 * F1[c] - 0.1), F1, CFG)
    c3 = crit.results[C3_F1]
    assert c3.status == "pass"
    assert c3.value == pytest.approx(1.0)
    assert isinstance(crit.f1_correlation, Correlation)
    assert crit.f1_correlation.r == pytest.approx(1.0)
    assert crit.f1_correlation.n == 5
    anti = evaluate_criteria(synthetic(lambda c: 0.6 - 0.5 * F1[c]), F1, CFG)
    assert anti.results[C3_F1].status == "fail"
    assert anti.results[C3_F1].value == pytest.approx(-1.0)


def test_constant_magnitude_leaves_c3_not_evaluable():
    crit = evaluate_criteria(synthetic(lambda c: 0.2), F1, CFG)
    assert crit.results[C3_F1].status == "not_evaluable"
    assert crit.results[C3_F1].value is None
    assert isinstance(crit.f1_correlation, NotEvaluable)


def test_c4_is_pending_without_human_ratings():
    crit = evaluate_criteria(synthetic(lambda c: 0.2), F1, CFG)
    c4 = crit.results[C4_HUMAN]
    assert c4.status == "pending"
    assert c4.value is None
    assert list(crit.results) == [C1_DIRECTION, C2_MAGNITUDE, C3_F1, C4_HUMAN]
    assert len(crit.table()) == 4


def test_criteria_metrics_one_zero_only_when_evaluable():
    crit = evaluate_criteria(synthetic(lambda c: 0.5 * F1[c] - 0.1), F1, CFG)
    metrics = criteria_metrics(crit.results)
    assert metrics[f"criterion/{C1_DIRECTION}"] == 1.0
    assert metrics[f"criterion/{C2_MAGNITUDE}"] == 1.0  # mean of 0.15..0.35 = 0.25
    assert metrics[f"criterion/{C3_F1}"] == 1.0
    assert metrics[f"criterion/{C4_HUMAN}"] is None
    assert metrics[f"criterion/{C4_HUMAN}/value"] is None
    thresholds = criteria_thresholds(crit.results)  # settings: logged as parameters
    assert thresholds[f"criterion/{C4_HUMAN}/threshold"] == 0.7
    assert thresholds[f"criterion/{C3_F1}/threshold"] == 0.5
    assert not any(k.endswith("/threshold") for k in metrics)
    failing = criteria_metrics(
        evaluate_criteria(synthetic(lambda c: 0.1, sign=-1.0), F1, CFG).results
    )
    assert failing[f"criterion/{C1_DIRECTION}"] == 0.0
    assert failing[f"criterion/{C2_MAGNITUDE}"] == 0.0
    assert failing[f"criterion/{C3_F1}"] is None


def test_magnitudes_fall_back_to_all_strengths_without_plus_minus_one():
    rows = []
    for concept, m in (("a", 0.1), ("b", 0.2), ("c", 0.3)):
        rows.append(rec(concept, 0, 0, 0.0, 0.3))
        rows.append(rec(concept, 0, 0, 0.5, 0.3 + m))
    records = add_paired_shifts(pd.DataFrame(rows))
    assert concept_magnitudes(records, at=1.0) == {}
    crit = evaluate_criteria(records, {"a": 0.1, "b": 0.2, "c": 0.3}, CFG)
    assert crit.results[C2_MAGNITUDE].status == "not_evaluable"
    assert crit.results[C3_F1].status == "pass"


# ---------------------------------------------------------------------------- never NaN


@st.composite
def random_records(draw):
    n_concepts = draw(st.integers(1, 5))
    strengths = draw(
        st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]), min_size=1, max_size=5, unique=True)
    )
    rows = []
    for c in range(n_concepts):
        for p in range(draw(st.integers(1, 2))):
            for sample in range(draw(st.integers(1, 2))):
                for s in strengths:
                    if draw(st.booleans()) or draw(st.booleans()):  # drop some, baselines too
                        delta = draw(st.sampled_from([0.0, 0.1, 0.3]) | st.floats(-1, 1))
                        rows.append(rec(f"c{c}", p, sample, s, delta))
    if not rows:
        rows.append(rec("c0", 0, 0, 1.0, 0.2))
    f1 = {
        f"c{c}": draw(st.sampled_from([0.5, 0.9]) | st.floats(0, 1))
        for c in range(n_concepts)
        if draw(st.booleans()) or c == 0
    }
    return pd.DataFrame(rows), f1


@PROPS
@given(random_records())
def test_criteria_and_cell_metrics_are_never_nan(case):
    records, f1 = case
    out = with_text_metrics(add_paired_shifts(records))
    crit = evaluate_criteria(out, f1, CFG)
    metrics = criteria_metrics(crit.results)
    assert len(metrics) == 2 * len(crit.results)
    for key, result in crit.results.items():
        verdict = metrics[f"criterion/{key}"]
        if result.evaluable:
            assert verdict in (0.0, 1.0)
            assert verdict == (1.0 if result.status == "pass" else 0.0)
        else:
            assert verdict is None
    for value in metrics.values():
        assert value is None or math.isfinite(value)
    for (_concept, _strength), cell in out.groupby(["concept", "strength"]):
        for name, value in cell_metrics(cell).items():
            assert value is None or math.isfinite(value), name
    for value in concept_magnitudes(out).values():
        assert math.isfinite(value)
