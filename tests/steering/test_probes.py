"""steering.probes: training specs, seeded probes, raw-space weights, files, evaluation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (
    average_precision_score,
    confusion_matrix,
    f1_score,
    precision_score,
    recall_score,
    roc_auc_score,
)

from steering.probes import (
    PREDICTORS,
    PROBE_FORMAT,
    LinearProbe,
    ProbeError,
    TrainSpec,
    choose_threshold,
    diffmean_direction,
    evaluate_probe,
    train_probe,
    train_separation,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=40)


def clusters(seed: int, n: int = 12, dim: int = 16, gap: float = 3.0, scale: float = 100.0):
    """Positives and negatives around means ``gap`` noise-units apart, at residual-like scale."""
    rng = np.random.default_rng(seed)
    axis = rng.normal(size=dim)
    axis /= np.linalg.norm(axis)
    centre = rng.normal(size=dim) * 2
    pos = centre + gap / 2 * axis + rng.normal(size=(n, dim))
    neg = centre - gap / 2 * axis + rng.normal(size=(n, dim))
    features = np.vstack([pos, neg]) * scale
    labels = np.array([1] * n + [0] * n)
    return features, labels


def make_probe(weight, bias=0.0, **kwargs) -> LinearProbe:
    defaults = dict(
        concept="dog.n.01",
        weight=np.asarray(weight, dtype=np.float64),
        bias=bias,
        layer=9,
        model_id="embedded:gemma-3-270m",
        train_spec="1x1x1",
        seed=0,
    )
    defaults.update(kwargs)
    return LinearProbe(**defaults)


# ---------------------------------------------------------------------------- TrainSpec


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1x1x1", (1, 1, 1)), ("5x5x5", (5, 5, 5)), ("3x0x2", (3, 0, 2)), ("2X1X0", (2, 1, 0))],
)
def test_train_spec_parses_valid_forms(text, expected):
    spec = TrainSpec.parse(text)
    assert (spec.n_pos, spec.n_neg, spec.n_neutral) == expected
    assert TrainSpec.parse(str(spec)) == spec
    assert str(spec) == "x".join(str(v) for v in expected)


@pytest.mark.parametrize(
    "text", ["", "1x1", "1x1x1x1", "axbxc", "0x1x1", "1x0x0", "-1x1x1", "1x-1x2", "1.5x1x1", "5"]
)
def test_train_spec_rejects_bad_forms_helpfully(text):
    with pytest.raises(ValueError) as info:
        TrainSpec.parse(text)
    message = str(info.value)
    assert repr(text) in message
    assert "PxNxU" in message
    assert "1x1x1" in message and "5x5x5" in message


def test_train_spec_default_is_the_seed_design():
    assert str(TrainSpec()) == "1x1x1"


# ---------------------------------------------------------------------------- training


def test_same_seed_gives_identical_weights():
    features, labels = clusters(0)
    w1, b1 = train_probe(features, labels, seed=3)
    w2, b2 = train_probe(features, labels, seed=3)
    assert np.array_equal(w1, w2)
    assert b1 == b2
    assert w1.shape == (features.shape[1],)
    assert isinstance(b1, float)


def test_train_probe_needs_both_classes():
    features, _ = clusters(0)
    with pytest.raises(ValueError, match="both positive"):
        train_probe(features, np.ones(len(features), dtype=int), seed=0)
    with pytest.raises(ValueError, match="both positive"):
        train_probe(features, np.full(len(features), 2), seed=0)


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 10),
    dim=st.integers(2, 40),
    gap=st.floats(1.0, 6.0),
    scale=st.sampled_from([1e-2, 1.0, 1e2, 1e4]),
)
def test_direction_points_toward_the_positives(seed, n, dim, gap, scale):
    features, labels = clusters(seed, n=n, dim=dim, gap=gap, scale=scale)
    weight, bias = train_probe(features, labels, seed=0)
    probe = make_probe(weight, bias)
    direction = probe.direction()
    assert np.linalg.norm(direction) == pytest.approx(1.0)
    mean_diff = features[labels == 1].mean(0) - features[labels == 0].mean(0)
    assert direction @ mean_diff > 0
    assert diffmean_direction(features, labels) @ mean_diff > 0


@PROPS
@given(
    seed=st.integers(0, 2**32 - 1),
    gap=st.floats(1.0, 6.0),
    scale=st.sampled_from([1e-2, 1.0, 1e3]),
    shift=st.floats(-50, 50),
)
def test_train_separation_is_scale_and_shift_free_and_grows_with_the_gap(seed, gap, scale, shift):
    features, labels = clusters(seed, n=6, dim=8, gap=gap, scale=scale)
    weight, _ = train_probe(features, labels, seed=0)
    base = train_separation(weight, features, labels)
    assert base > 0  # the fitted direction separates its own training classes
    moved = train_separation(weight, features * 3.0 + shift, labels)
    assert moved == pytest.approx(base, rel=1e-6)
    assert train_separation(-weight, features, labels) == pytest.approx(-base)


def test_train_separation_grows_with_the_class_gap():
    values = []
    for gap in (0.5, 2.0, 8.0):
        features, labels = clusters(0, n=50, dim=8, gap=gap)
        axis = np.random.default_rng(0).normal(size=8)  # clusters(seed=0)'s class axis
        values.append(train_separation(axis, features, labels))
    assert values[0] < values[1] < values[2]


@PROPS
@given(seed=st.integers(0, 2**32 - 1), scale=st.sampled_from([1e-2, 1.0, 1e3]))
def test_raw_space_decision_equals_sklearn_on_scaled_features(seed, scale):
    """Training centres and divides by one global scale; the stored weight is in raw space."""
    features, labels = clusters(seed, n=8, dim=12, gap=1.5, scale=scale)
    weight, bias = train_probe(features, labels, seed=5, c=0.5)
    centred = features - features.mean(axis=0)
    global_scale = float(np.linalg.norm(centred, axis=1).mean())
    reference = LogisticRegression(
        C=0.5, class_weight="balanced", random_state=5, max_iter=5000
    ).fit(centred / global_scale, labels)
    probe = make_probe(weight, bias)
    np.testing.assert_allclose(
        probe.decision(features),
        reference.decision_function(centred / global_scale),
        rtol=1e-9,
        atol=1e-9,
    )
    np.testing.assert_allclose(
        probe.predict_proba(features),
        reference.predict_proba(centred / global_scale)[:, 1],
        rtol=1e-9,
        atol=1e-12,
    )
    np.testing.assert_array_equal(
        probe.predict(features), reference.predict(centred / global_scale)
    )
    # one scalar scale: the raw-space direction is the scaled-space direction
    coef = reference.coef_[0]
    np.testing.assert_allclose(probe.direction(), coef / np.linalg.norm(coef), atol=1e-12)


def test_diffmean_direction_is_the_unit_difference_of_means():
    features = np.array([[2.0, 0.0], [4.0, 0.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.0]])
    labels = np.array([1, 1, 0, 0, 0])
    np.testing.assert_allclose(diffmean_direction(features, labels), [1.0, 0.0])


def test_zero_weight_has_no_direction():
    with pytest.raises(ProbeError, match="zero weight"):
        make_probe(np.zeros(4)).direction()


# ---------------------------------------------------------------------------- files


@pytest.mark.parametrize("with_diffmean", [False, True])
def test_save_load_round_trip(tmp_path, with_diffmean):
    rng = np.random.default_rng(0)
    probe = make_probe(
        rng.normal(size=8) * 1e-3,
        bias=-0.123456789,
        train_texts=["What is a dog?", "What is justice?"],
        train_labels=[1, 0],
        metrics={"f1": 0.75, "confusion": {"tp": 3}},
        diffmean=diffmean_direction(rng.normal(size=(4, 8)), np.array([1, 1, 0, 0]))
        if with_diffmean
        else None,
    )
    path = probe.save(tmp_path / "sub" / "dog.json")
    assert path.exists()
    assert not path.with_suffix(".tmp").exists()
    raw = json.loads(path.read_text())
    assert raw["format"] == PROBE_FORMAT
    loaded = LinearProbe.load(path)
    assert np.array_equal(loaded.weight, probe.weight)  # exact: JSON floats round-trip
    assert loaded.weight.dtype == np.float64
    assert loaded.bias == probe.bias
    for name in ("concept", "layer", "model_id", "train_spec", "seed"):
        assert getattr(loaded, name) == getattr(probe, name)
    assert loaded.train_texts == probe.train_texts
    assert loaded.train_labels == probe.train_labels
    assert loaded.metrics == probe.metrics
    if with_diffmean:
        assert np.array_equal(loaded.diffmean, probe.diffmean)
    else:
        assert loaded.diffmean is None
    features = rng.normal(size=(5, 8))
    np.testing.assert_array_equal(loaded.decision(features), probe.decision(features))


def test_load_missing_file_says_make_classifiers(tmp_path):
    with pytest.raises(ProbeError, match=r"no classifier at .*make classifiers"):
        LinearProbe.load(tmp_path / "absent.json")


def test_load_wrong_format(tmp_path):
    path = tmp_path / "p.json"
    data = make_probe(np.ones(3)).to_dict()
    data["format"] = "someone-else/probe/v9"
    path.write_text(json.dumps(data))
    with pytest.raises(ProbeError, match=f"not a {PROBE_FORMAT} file"):
        LinearProbe.load(path)
    del data["format"]
    path.write_text(json.dumps(data))
    with pytest.raises(ProbeError, match="not a"):
        LinearProbe.load(path)


def test_load_invalid_json(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"format": "steer-eval/linear-probe/v1", ')
    with pytest.raises(ProbeError, match="not valid JSON"):
        LinearProbe.load(path)


def test_load_unexpected_fields(tmp_path):
    path = tmp_path / "p.json"
    data = make_probe(np.ones(3)).to_dict()
    data["colour"] = "blue"
    path.write_text(json.dumps(data))
    with pytest.raises(ProbeError, match="unexpected fields"):
        LinearProbe.load(path)


@pytest.mark.parametrize("missing", ["concept", "weight"])
def test_load_missing_field_is_a_probe_error(tmp_path, missing):
    path = tmp_path / "p.json"
    data = make_probe(np.ones(3)).to_dict()
    del data[missing]
    path.write_text(json.dumps(data))
    with pytest.raises(ProbeError):
        LinearProbe.load(path)


def test_load_json_that_is_not_an_object_is_a_probe_error(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("[1, 2, 3]")
    with pytest.raises(ProbeError):
        LinearProbe.load(path)


def test_check_compatible(tmp_path):
    probe = make_probe(np.ones(3), model_id="embedded:gemma-3-270m", layer=9)
    probe.check_compatible("embedded:gemma-3-270m", 9)  # no error
    with pytest.raises(ProbeError) as info:
        probe.check_compatible("google/gemma-3-4b-pt", 9)
    message = str(info.value)
    assert "embedded:gemma-3-270m" in message and "google/gemma-3-4b-pt" in message
    assert "make classifiers" in message
    with pytest.raises(ProbeError, match=r"at layer 9.*at layer 17.*make classifiers"):
        probe.check_compatible("embedded:gemma-3-270m", 17)


# ---------------------------------------------------------------------------- evaluation


@PROPS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 30), bias=st.floats(-3, 3))
def test_evaluate_probe_agrees_with_sklearn(seed, n, bias):
    """Raw metrics are at the fitted decision (> 0); the keys say so (``_raw``)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, 5))
    labels = rng.integers(0, 2, size=n)
    probe = make_probe(rng.normal(size=5), bias=bias)
    result = evaluate_probe(probe, features, labels)
    predicted = probe.predict(features)
    c = result["confusion_raw"]
    assert c["tn"] + c["fp"] + c["fn"] + c["tp"] == n == result["n_eval"]
    assert c["tp"] + c["fn"] == int(labels.sum()) == result["n_test_pos"]
    assert c["tn"] + c["fp"] == n - int(labels.sum()) == result["n_test_neg"]
    assert c["tp"] + c["fp"] == int(predicted.sum())
    tn, fp, fn, tp = confusion_matrix(labels, predicted, labels=[0, 1]).ravel()
    assert (c["tn"], c["fp"], c["fn"], c["tp"]) == (tn, fp, fn, tp)
    assert result["f1_raw"] == pytest.approx(f1_score(labels, predicted, zero_division=0))
    assert result["precision_raw"] == pytest.approx(
        precision_score(labels, predicted, zero_division=0)
    )
    assert result["recall_raw"] == pytest.approx(recall_score(labels, predicted, zero_division=0))
    expected_f1 = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
    assert result["f1_raw"] == pytest.approx(expected_f1)
    assert result["accuracy_raw"] == pytest.approx((tp + tn) / n)
    scores = probe.decision(features)
    if len(set(labels.tolist())) == 2:
        assert result["auroc"] == pytest.approx(roc_auc_score(labels, scores))
        assert result["ap"] == pytest.approx(average_precision_score(labels, scores))
        assert result["class_ratio"] == pytest.approx(labels.sum() / (n - labels.sum()))
    else:
        assert result["auroc"] is None
    for key in ("f1_raw", "precision_raw", "recall_raw", "accuracy_raw"):
        assert np.isfinite(result[key])
    # without a validation split nothing is calibrated, and nothing pretends to be
    assert result["threshold"] is None and result["f1_calibrated"] is None
    assert "f1" not in result


def test_evaluate_a_trained_probe_on_held_out_clusters():
    features, labels = clusters(1, n=20, gap=6.0)
    weight, bias = train_probe(features[::2], labels[::2], seed=0)
    probe = make_probe(weight, bias)
    validation = (features[::2], labels[::2])
    result = evaluate_probe(probe, features[1::2], labels[1::2], validation=validation)
    assert result["f1_raw"] == 1.0 == result["f1_calibrated"]
    assert result["auroc"] == 1.0
    assert result["ap"] == pytest.approx(1.0)
    assert result["confusion_raw"] == {"tn": 10, "fp": 0, "fn": 0, "tp": 10}
    assert result["confusion_calibrated"] == result["confusion_raw"]
    assert result["n_val_pos"] == result["n_val_neg"] == 10
    probe.metrics = result
    assert probe.predictor("f1_calibrated") == 1.0 == probe.predictor("auroc")
    assert probe.predictor("ap") == pytest.approx(1.0)


def test_calibrated_threshold_comes_from_validation_not_test():
    """A probe whose intercept is far off: raw F1 is 0, the validation threshold repairs it,
    and the test labels never influence the threshold."""
    features, labels = clusters(2, n=30, gap=5.0)
    weight, bias = train_probe(features, labels, seed=0)
    shifted = make_probe(weight, bias - 1e3)  # every decision far below 0
    val, test = slice(0, None, 2), slice(1, None, 2)
    result = evaluate_probe(
        shifted, features[test], labels[test], validation=(features[val], labels[val])
    )
    assert result["f1_raw"] == 0.0
    assert result["f1_calibrated"] > 0.9
    assert result["threshold"] == pytest.approx(
        choose_threshold(shifted.decision(features[val]), labels[val])
    )
    flipped = evaluate_probe(
        shifted, features[test], 1 - labels[test], validation=(features[val], labels[val])
    )
    assert flipped["threshold"] == result["threshold"]


def test_choose_threshold_maximises_f1_with_documented_ties():
    # Separable: every threshold strictly between 2 and 5 gives F1 = 1; the widest interval
    # of equal predictions is (2, 5), so its midpoint wins.
    assert choose_threshold(np.array([0.0, 1.0, 2.0, 5.0, 6.0]), np.array([0, 0, 0, 1, 1])) == 3.5
    # Overlap: best F1 is at predicting the top three (tp 2, fp 1) -> between 1 and 2.
    t = choose_threshold(np.array([0.0, 1.0, 2.0, 3.0, 4.0]), np.array([0, 0, 1, 0, 1]))
    assert 0.0 < t < 2.0
    # All one score: the point below it (predict everything positive) beats predicting none.
    assert choose_threshold(np.array([1.0, 1.0]), np.array([0, 1])) == 0.5
    with pytest.raises(ValueError):
        choose_threshold(np.array([]), np.array([]))


@PROPS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 40))
def test_chosen_threshold_is_optimal_on_its_own_split(seed, n):
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=n), 1)
    labels = rng.integers(0, 2, size=n)
    t = choose_threshold(scores, labels)
    best = f1_score(labels, (scores > t).astype(int), zero_division=0)
    for other in np.concatenate([scores, scores - 1e-9, [scores.min() - 1, scores.max() + 1]]):
        assert best >= f1_score(labels, (scores > other).astype(int), zero_division=0) - 1e-12


def test_predictor_names_and_config_choices_agree():
    from typing import get_args

    from experiments.config import Predictor

    assert set(get_args(Predictor)) == set(PREDICTORS)
    probe = make_probe(np.ones(3), metrics={"auroc": 0.8, "ap": 0.7, "f1_raw": 0.2})
    assert probe.predictor("auroc") == 0.8
    assert probe.predictor("f1_calibrated") is None
    with pytest.raises(ProbeError, match="unknown predictor"):
        probe.predictor("f1")
