"""The manipulated directions: exact rotations, template-stratified label noise, the
shrinkage path's two ends, principal components, the grid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.concepts import load_concepts
from experiments.config import IdentifyConfig
from experiments.identify.directions import (
    REFERENCE,
    TrainingSet,
    concept_diffmean,
    orthogonal_part,
    other_nuisance,
    pc_nuisance,
    principal_components,
    rotate,
    shrinkage_direction,
    swap_labels,
    unit,
    within_class_covariance,
)
from experiments.identify.manipulations import MANIPULATIONS, direction_grid, reference_level
from experiments.prompts import probe_training_set

GRAPH = load_concepts("data/concepts/wordnet_top50.json", limit=3)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    dim=st.integers(3, 64),
    theta=st.floats(0, 90, allow_nan=False),
)
def test_a_rotation_has_exactly_the_cosine_it_was_asked_for(seed, dim, theta):
    rng = np.random.default_rng(seed)
    v, u = rng.standard_normal(dim), rng.standard_normal(dim)
    out = rotate(v, u, theta)
    assert np.linalg.norm(out) == pytest.approx(1, abs=1e-12)
    assert out @ unit(v) == pytest.approx(np.cos(np.deg2rad(theta)), abs=1e-9)
    # and it turns toward u's part orthogonal to v, not anywhere else
    assert out @ orthogonal_part(u, v) == pytest.approx(np.sin(np.deg2rad(theta)), abs=1e-9)


def test_ninety_degrees_is_the_nuisance_itself_made_orthogonal():
    rng = np.random.default_rng(1)
    v, u = rng.standard_normal(20), rng.standard_normal(20)
    assert rotate(v, u, 90) @ unit(v) == pytest.approx(0, abs=1e-12)
    assert np.allclose(rotate(v, u, 90), orthogonal_part(u, v))


def training_set(n: int = 16, seed: int = 0) -> TrainingSet:
    """A format-matched set: n templates, each with one positive, negative, neutral."""
    rng = np.random.default_rng(seed)
    kinds = ["positive"] * n + ["negative"] * n + ["neutral"] * n
    labels = np.array([1] * n + [0] * (2 * n))
    templates = [f"t{i:02d}" for i in range(n)] * 3
    features = rng.standard_normal((3 * n, 8)) + labels[:, None] * 2.0
    return TrainingSet(features, labels, kinds, templates, list(range(n)) * 3)


@settings(max_examples=40, deadline=None)
@given(rho=st.sampled_from([0.0, 0.1, 0.2, 0.25, 0.3, 0.4]), seed=st.integers(0, 50))
def test_label_noise_swaps_within_templates_so_format_and_balance_hold(rho, seed):
    data = training_set()
    labels, swapped = swap_labels(data, rho, seed, "c")
    assert swapped == round(rho * 16)
    assert labels.sum() == data.labels.sum()  # balance kept
    by_template: dict[str, list[int]] = {}
    for label, kind, template in zip(labels, data.kinds, data.templates, strict=True):
        if kind != "neutral":
            by_template.setdefault(template, []).append(int(label))
    # every template still holds exactly one label-1 text among its positive and negative
    assert all(sorted(v) == [0, 1] for v in by_template.values())
    flipped = [i for i in range(len(labels)) if labels[i] != data.labels[i]]
    assert len(flipped) == 2 * swapped
    assert all(data.kinds[i] != "neutral" for i in flipped)


def test_label_noise_is_seeded_and_the_noisy_diffmean_moves_away():
    data = training_set()
    a, _ = swap_labels(data, 0.25, 0, "c")
    b, _ = swap_labels(data, 0.25, 0, "c")
    c, _ = swap_labels(data, 0.25, 1, "c")
    assert (a == b).all() and not (a == c).all()
    clean = concept_diffmean(data)
    noisy = concept_diffmean(data, swap_labels(data, 0.4, 0, "c")[0])
    assert noisy @ clean < 1 - 1e-6


def test_the_shrinkage_path_runs_from_diffmean_to_the_whitened_direction():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 8))
    sigma = a @ a.T + np.eye(8)  # full rank
    delta = rng.standard_normal(8)
    assert np.allclose(shrinkage_direction(delta, sigma, 1.0), unit(delta))
    whitened = unit(np.linalg.solve(sigma, delta))
    assert shrinkage_direction(delta, sigma, 1e-6) @ whitened == pytest.approx(1, abs=1e-5)
    with pytest.raises(ValueError):
        shrinkage_direction(delta, sigma, 0.0)


def test_the_covariance_centres_each_class_on_its_own_mean():
    data = training_set()
    shifted = TrainingSet(
        data.features + data.labels[:, None] * 100.0,
        data.labels,
        data.kinds,
        data.templates,
        data.order,
    )
    assert np.allclose(within_class_covariance(data), within_class_covariance(shifted))


def test_principal_components_find_the_planted_high_variance_axis():
    rng = np.random.default_rng(0)
    axis = unit(rng.standard_normal(12))
    acts = rng.standard_normal((300, 12)) + np.outer(rng.standard_normal(300) * 10, axis)
    top = principal_components(acts, 1)[0]
    assert abs(top @ axis) > 0.99
    u = pc_nuisance(principal_components(acts, 3), 0, "c")
    assert np.linalg.norm(u) == pytest.approx(1)


def test_the_other_concept_nuisance_is_another_concept():
    refs = {"a": unit(np.ones(4)), "b": unit(np.arange(4.0) + 1), "c": unit(-np.ones(4) + 0.1)}
    name, vec = other_nuisance(refs, "a", 0)
    assert name != "a" and np.allclose(vec, refs[name])
    with pytest.raises(ValueError):
        other_nuisance({"a": refs["a"]}, "a", 0)


def test_smaller_sizes_are_prefixes_of_the_reference_training_set():
    concept = GRAPH.concepts[0]
    big = probe_training_set(concept, GRAPH, 16, 16, 16, 0)
    small = probe_training_set(concept, GRAPH, 2, 2, 2, 0)
    data = TrainingSet(
        np.arange(len(big), dtype=float)[:, None],
        np.array([e.label for e in big]),
        [e.kind for e in big],
        [e.source.split(":")[3] for e in big],
        [i % 16 for i in range(len(big))],
    )
    part = data.prefix(2, 2, 2)
    assert [big[int(i)].text for i in part.features[:, 0]] == [e.text for e in small]


def test_the_grid_lists_the_reference_once_and_every_manipulation():
    ident = IdentifyConfig(
        theta_degrees=[0, 45, 90],
        nuisances=["isotropic", "pc"],
        label_noise=[0, 0.2],
        noise_seeds=[0, 1],
        logistic_c=[0.1, 1.0],
        shrinkage=[1.0, 0.1],
        sizes=["1x1x1", "16x16x16"],
        reference_size="16x16x16",
        null_draws=2,
    )
    specs = direction_grid(ident)
    ids = [s.id for s in specs]
    assert ids[0] == REFERENCE and len(ids) == len(set(ids))
    assert "rotation:pc:0" not in ids and "rotation:pc:45" in ids
    assert {"noise:0.2:0", "noise:0.2:1", "logistic:0.1", "shrinkage:0.1", "size:1x1x1"} <= set(ids)
    assert "shrinkage:1" not in ids and "size:16x16x16" not in ids
    assert {"null:0", "null:1"} <= set(ids)
    by_id = {s.id: s for s in specs}
    assert by_id["rotation:pc:45"].manipulation == "rotation:pc"
    assert by_id["logistic:0.1"].level == pytest.approx(-1) and by_id["size:1x1x1"].level == 3
    assert reference_level("size", ident) == 48 and reference_level("logistic", ident) is None
    assert reference_level("rotation:pc", ident) == 0 and reference_level("shrinkage", ident) == 1


def test_every_manipulation_names_a_field_of_the_identify_config():
    fields = IdentifyConfig.model_fields
    for m in MANIPULATIONS.values():
        named = [m.levels, m.within, m.seeds, m.reference if isinstance(m.reference, str) else None]
        assert all(f in fields for f in named if f is not None), m.name
