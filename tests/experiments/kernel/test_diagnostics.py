"""Direction diagnostics: cosine matrices, format-axis cosines, metrics and figures."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.kernel.diagnostics import (
    classifier_set_diagnostics,
    cosine_heatmap,
    cosine_matrix,
    diagnostics_metrics,
    direction_diagnostics,
    format_axis,
    format_axis_floor,
    layer_heatmap,
    steering_diagnostics,
)
from steering.probes import LinearProbe


def probe(concept, weight, diffmean) -> LinearProbe:
    return LinearProbe(
        concept=concept,
        weight=np.asarray(weight, dtype=np.float64),
        bias=0.0,
        layer=9,
        model_id="m",
        train_spec="1x1x1",
        seed=0,
        diffmean=np.asarray(diffmean, dtype=np.float64),
    )


def test_a_shared_component_shows_in_the_mean_pairwise_cosine():
    """Ten directions that are half a shared axis, as in the first release, versus ten
    random ones: the diagnostic tells them apart."""
    rng = np.random.default_rng(0)
    shared = rng.normal(size=640)
    shared /= np.linalg.norm(shared)
    own = {f"c{i}": rng.normal(size=640) for i in range(10)}
    confounded = {k: v / np.linalg.norm(v) + shared for k, v in own.items()}
    clean = direction_diagnostics(own, shared)
    dirty = direction_diagnostics(confounded, shared)
    assert abs(clean["mean_pairwise_cosine"]) < 0.05
    assert dirty["mean_pairwise_cosine"] == pytest.approx(0.5, abs=0.05)
    assert clean["mean_abs_cos_format_axis"] < 0.1
    assert dirty["mean_abs_cos_format_axis"] == pytest.approx(np.sqrt(0.5), abs=0.05)
    matrix = np.asarray(dirty["cosine_matrix"])
    np.testing.assert_allclose(np.diag(matrix), 1.0)
    np.testing.assert_allclose(matrix, matrix.T)
    assert dirty["concepts"] == list(own)


def test_format_axis_is_the_unit_mean_difference():
    questions = np.array([[2.0, 1.0], [4.0, 1.0]])
    statements = np.array([[0.0, 1.0], [0.0, 1.0]])
    axis, norm = format_axis(questions, statements)
    np.testing.assert_allclose(axis, [1.0, 0.0])
    assert norm == pytest.approx(3.0)
    np.testing.assert_allclose(cosine_matrix({"a": axis, "b": -axis}), [[1, -1], [-1, 1]])


def test_the_floor_is_what_format_free_differences_show():
    rng = np.random.default_rng(2)
    axis = np.zeros(64)
    axis[0] = 1.0
    isotropic = [rng.normal(size=(30, 64)) for _ in range(4)]
    stretched = [g * np.r_[20.0, np.ones(63)] for g in isotropic]  # variance along the axis
    low = format_axis_floor(isotropic, axis)
    high = format_axis_floor(stretched, axis)
    assert low == pytest.approx(np.sqrt(2 / (np.pi * 64)), abs=0.05)
    assert high > 0.6
    assert format_axis_floor(isotropic, axis) == low  # seeded
    assert format_axis_floor([isotropic[0][:2]], axis) is None


def test_classifier_set_and_steering_diagnostics():
    probes = {
        "a": probe("a", [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]),
        "b": probe("b", [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]),
    }
    axis = np.array([0.0, 1.0, 0.0])
    diag = classifier_set_diagnostics(probes, axis)
    assert set(diag["sources"]) == {"classifier", "diffmean", "classifier_deformat"}
    assert diag["cos_probe_diffmean"]["a"] == pytest.approx(np.sqrt(0.5))
    assert diag["sources"]["classifier"]["mean_pairwise_cosine"] == pytest.approx(0.5)
    assert diag["sources"]["classifier_deformat"]["mean_pairwise_cosine"] == pytest.approx(0.0)
    assert classifier_set_diagnostics(probes, None)["sources"].keys() == {"classifier", "diffmean"}
    run = steering_diagnostics({k: p.direction() for k, p in probes.items()}, probes, axis, "x")
    assert run["source"] == "x"
    assert run["cos_format_axis"]["b"] == pytest.approx(np.sqrt(0.5))
    metrics = diagnostics_metrics(run, "diagnostics")
    assert metrics["diagnostics/mean_pairwise_cosine"] == pytest.approx(0.5)
    assert metrics["diagnostics/cos_probe_diffmean/a"] == pytest.approx(np.sqrt(0.5))
    no_axis = diagnostics_metrics(direction_diagnostics({"a": axis}), "d")
    assert (
        no_axis["d/mean_pairwise_cosine"] is None and no_axis["d/mean_abs_cos_format_axis"] is None
    )


def test_figures_draw():
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(1)
    diag = direction_diagnostics({f"c{i}.n.01": rng.normal(size=8) for i in range(3)})
    fig = cosine_heatmap({"classifier": diag, "diffmean": diag}, "t")
    assert len(fig.axes) >= 2
    plt.close(fig)
    fig = layer_heatmap({3: {"a": 0.6, "b": None}, 9: {"a": 0.9, "b": 0.7}})
    plt.close(fig)
