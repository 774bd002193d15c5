"""A direction scored as its own detector; the vectorised half-split metrics equal sklearn's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, f1_score, roc_auc_score

from experiments.identify.stages.detect import (
    ap_rows,
    auroc_rows,
    f1_rows,
    half_metrics,
    score_direction,
)
from metrics.reliability import split_orders
from steering.probes import LinearProbe, choose_threshold, evaluate_probe


def splits(seed: int = 0, n: int = 20, dim: int = 6):
    rng = np.random.default_rng(seed)
    y = np.array([1] * n + [0] * n)
    x = rng.standard_normal((2 * n, dim)) + y[:, None] * np.linspace(0, 1, dim)
    xv = rng.standard_normal((2 * n, dim)) + y[:, None] * np.linspace(0, 1, dim)
    return (x, y), (xv, y)


def test_a_probe_direction_scores_as_the_probe_itself():
    test, validation = splits()
    weight = np.linspace(-0.2, 1.0, 6)
    probe = LinearProbe("c", weight, 0.3, 0, "m", "1x1x1", 0)
    expected = evaluate_probe(probe, *test, validation=validation)
    got = score_direction(weight / np.linalg.norm(weight), test, validation)
    assert got.auroc == pytest.approx(expected["auroc"])
    assert got.ap == pytest.approx(expected["ap"])
    assert got.f1_calibrated == pytest.approx(expected["f1_calibrated"])


def test_the_threshold_comes_from_validation_never_from_test():
    test, validation = splits(1)
    d = np.ones(6) / np.sqrt(6)
    got = score_direction(d, test, validation)
    assert got.threshold == choose_threshold(validation[0] @ d, validation[1])
    predicted = (test[0] @ d > got.threshold).astype(int)
    assert got.f1_calibrated == pytest.approx(f1_score(test[1], predicted))


def test_held_out_auroc_ranks_validation_and_test_texts_and_keeps_f1_on_test():
    """identify.auroc_texts: held_out: AUROC and AP over both held-out splits (twice the
    texts), calibrated F1 as before (test split, validation threshold)."""
    test, validation = splits(2)
    d = np.linspace(1.0, -0.3, 6) / np.linalg.norm(np.linspace(1.0, -0.3, 6))
    alone = score_direction(d, test, validation)
    both = score_direction(d, test, validation, held_out=True)
    x = np.concatenate([test[0], validation[0]]) @ d
    y = np.concatenate([test[1], validation[1]])
    assert both.auroc == pytest.approx(roc_auc_score(y, x))
    assert both.ap == pytest.approx(average_precision_score(y, x))
    assert both.auroc != alone.auroc
    assert both.f1_calibrated == alone.f1_calibrated and both.threshold == alone.threshold
    assert both.labels is not None and len(both.scores) == len(both.labels) == 4 * 20
    assert alone.labels is None and len(alone.scores) == 2 * 20


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 15))
def test_vectorised_metrics_equal_sklearn(seed, n):
    rng = np.random.default_rng(seed)
    labels = np.array([1] * n + [0] * n)
    scores = rng.standard_normal((4, 2 * n)) + labels
    thresholds = rng.standard_normal(4)
    for row, t in zip(scores, thresholds, strict=True):
        assert auroc_rows(row, labels) == pytest.approx(roc_auc_score(labels, row))
        assert ap_rows(row, labels) == pytest.approx(average_precision_score(labels, row))
        assert f1_rows(row[None], labels, np.array([t]))[0] == pytest.approx(
            f1_score(labels, (row > t).astype(int), zero_division=0)
        )


def test_half_metrics_score_each_half_of_the_stratified_split():
    rng = np.random.default_rng(0)
    labels = np.array([1] * 10 + [0] * 10)
    scores = rng.standard_normal((3, 20)) + labels
    thresholds = np.zeros(3)
    orders = split_orders(20, 5, strata=list(labels), rng=np.random.default_rng(1))
    halves = half_metrics(scores, thresholds, labels, orders)
    assert halves["auroc"].shape == (3, 5, 2)
    first_half = orders[2, 1::2]
    assert labels[first_half].sum() == 5  # stratified: both classes in every half
    assert halves["auroc"][1, 2, 1] == pytest.approx(
        roc_auc_score(labels[first_half], scores[1, first_half])
    )
    assert halves["ap"][0, 2, 1] == pytest.approx(
        average_precision_score(labels[first_half], scores[0, first_half])
    )
