"""The manipulated directions: exact rotations, template-stratified label noise, the
shrinkage path's two ends, principal components, the grid."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.concepts import load_concepts
from experiments.config import IdentifyConfig
from experiments.identify.stages.directions import (
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
    template_halves,
    unit,
    within_class_covariance,
)
from experiments.identify.stages.manipulations import MANIPULATIONS, direction_grid, reference_level
from experiments.prompts import ProbeExample, probe_training_set

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


def test_the_other_nuisance_skips_the_concepts_of_its_own_off_concept_texts():
    refs = {c: unit(np.arange(4.0) + i) for i, c in enumerate("abcde")}
    for avoid in ({"b"}, {"b", "c"}, {"b", "c", "d"}):
        name, _ = other_nuisance(refs, "a", 0, avoid)
        assert name not in avoid and name != "a"
    # nothing left to choose: any other concept, not an error
    assert other_nuisance(refs, "a", 0, {"b", "c", "d", "e"})[0] in "bcde"


def test_the_logistic_path_is_fitted_on_the_reference_contrast():
    """Positives against negative-concept texts only, like v*: a neutral text that
    shifts the logistic fit when seen as a negative leaves the direction unchanged."""
    from experiments.identify.stages.directions import (
        DirectionSpec,
        TrainingSet,
        logistic_direction,
    )
    from experiments.identify.stages.manipulations import ConceptInputs, build_direction

    rng = np.random.default_rng(0)
    kinds = ["positive"] * 6 + ["negative"] * 6 + ["neutral"] * 6
    x = rng.standard_normal((18, 5))
    x[:6, 0] += 2.0
    x[12:, 1] += 5.0  # neutrals far along another axis
    labels = np.array([1] * 6 + [0] * 12)
    train = TrainingSet(x, labels, kinds, ["t"] * 18, list(range(18)))
    inputs = ConceptInputs("c", 0, unit(np.ones(5)), train, {}, None, np.eye(5), np.ones(5))
    built, _ = build_direction(DirectionSpec("logistic:1", "logistic", 0.0, None, "1.0"), inputs)
    alone = logistic_direction(x[:12], labels[:12], 1.0, 0)
    with_neutrals = logistic_direction(x, labels, 1.0, 0)
    np.testing.assert_allclose(unit(built), unit(alone), atol=1e-9)
    assert abs(unit(with_neutrals) @ unit(alone)) < 0.999


def reference_training_set() -> tuple[list[ProbeExample], TrainingSet]:
    """A concept's real 16x16x16 training texts, and a TrainingSet whose one feature is
    each text's index (so a smaller set names the texts it kept)."""
    big = probe_training_set(GRAPH.concepts[0], GRAPH, 16, 16, 16, 0)
    data = TrainingSet(
        np.arange(len(big), dtype=float)[:, None],
        np.array([e.label for e in big]),
        [e.kind for e in big],
        [e.source.split(":")[3] for e in big],
        [i % 16 for i in range(len(big))],
    )
    return big, data


def test_smaller_sizes_are_prefixes_of_the_reference_training_set():
    big, data = reference_training_set()
    small = probe_training_set(GRAPH.concepts[0], GRAPH, 2, 2, 2, 0)
    part = data.prefix(2, 2, 2)
    assert [big[int(i)].text for i in part.features[:, 0]] == [e.text for e in small]


def test_the_reference_halves_split_whole_templates_and_each_kind_evenly():
    """v3's split-half reference: no template in both halves (a positive and its
    template's negative text share the format), each kind 8 and 8 of the real 16x16x16
    training set, and every text in exactly one half."""
    big, data = reference_training_set()
    halves = template_halves(data)
    a, b = data.half(0), data.half(1)
    assert set(a.templates).isdisjoint(b.templates)
    for kind in ("positive", "negative", "neutral"):
        assert a.kinds.count(kind) == b.kinds.count(kind) == 8
    assert sorted([*a.features[:, 0], *b.features[:, 0]]) == list(range(len(big)))
    assert (halves == 0).sum() == len(a.kinds)


def test_a_template_shared_by_kinds_stays_in_one_half():
    data = training_set()
    halves = template_halves(data)
    by_template: dict[str, set[int]] = {}
    for t, h in zip(data.templates, halves, strict=True):
        by_template.setdefault(t, set()).add(int(h))
    assert all(len(v) == 1 for v in by_template.values())
    assert int(halves.sum()) == len(halves) // 2


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


def test_graded_nuisances_are_orthogonal_to_v_star_and_spread_detection():
    from experiments.identify.stages.directions import graded_nuisances, rotate

    rng = np.random.default_rng(3)
    d = 16
    scales = np.geomspace(5, 0.2, d)
    neg = rng.standard_normal((200, d)) * scales
    pos = rng.standard_normal((200, d)) * scales + 0.8 * np.eye(d)[3] + 0.3 * np.eye(d)[0]
    v_star = unit(pos.mean(0) - neg.mean(0))
    centred = np.concatenate([pos - pos.mean(0), neg - neg.mean(0)])
    sigma = centred.T @ centred / len(centred)
    nuisances = graded_nuisances(sigma, v_star, pos.mean(0) - neg.mean(0), 5)
    assert len(nuisances) == 5
    for u in nuisances:
        assert abs(u @ v_star) < 1e-10 and np.linalg.norm(u) == pytest.approx(1)

    # at one angle, cos(v, v*) is the same for every nuisance while separation differs
    def separation(v):
        a, b = pos @ v, neg @ v
        return (a.mean() - b.mean()) / np.sqrt((a.var() + b.var()) / 2)

    at_45 = [rotate(v_star, u, 45.0) for u in nuisances]
    assert all(v @ v_star == pytest.approx(np.cos(np.pi / 4)) for v in at_45)
    spread = [separation(v) for v in at_45]
    assert max(spread) - min(spread) > 0.3 * separation(v_star)
    assert spread[0] == max(spread)  # the discriminative residual keeps detection best


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), dim=st.integers(8, 80), bands=st.integers(1, 4))
def test_random_nuisances_are_unit_orthogonal_stratified_and_seeded(seed, dim, bands):
    """v3's draws: unit, ⟂ v*, draw k in band k mod bands, the same draw for the same
    (seed, concept, k) and another concept's draw different."""
    from experiments.identify.stages.directions import random_nuisances, spectrum_bands

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((dim * 2, dim))
    sigma = a.T @ a / len(a)
    v_star = unit(rng.standard_normal(dim))
    drawn = random_nuisances(sigma, v_star, 2 * bands, bands, seed, "dog.n.01")
    slices = spectrum_bands(dim, bands)
    assert [b for _, b in drawn] == [k % bands for k in range(2 * bands)]
    assert slices[0][0] == 0 and slices[-1][1] == dim
    assert all(lo < hi for lo, hi in slices)
    for u, _ in drawn:
        assert np.linalg.norm(u) == pytest.approx(1.0)
        assert abs(u @ v_star) < 1e-9
    again = random_nuisances(sigma, v_star, 2 * bands, bands, seed, "dog.n.01")
    assert all(np.array_equal(x, y) for (x, _), (y, _) in zip(drawn, again, strict=True))
    other = random_nuisances(sigma, v_star, 2 * bands, bands, seed, "cat.n.01")
    # independent signs per concept: two concepts' draws of a band n wide coincide with
    # chance 2^-n, so a narrow band's may (seed 3133, dim 8: band (2, 8) did); each draw
    # of a band >= 24 wide must differ, and so must the draws taken together (all of
    # them coincide with chance at most 2^-16 over these dims and bands)
    width = [slices[k % bands][1] - slices[k % bands][0] for k in range(2 * bands)]
    assert all(
        not np.allclose(drawn[k][0], other[k][0]) for k in range(2 * bands) if width[k] >= 24
    )
    assert not all(np.allclose(x, y) for (x, _), (y, _) in zip(drawn, other, strict=True))


def test_random_signs_spread_the_noise_along_v_star_inside_a_band():
    """What the draw is for: at one angle, v*ᵀΣu (which sets AUROC) differs between draws
    of one band, so the estimator has AUROC variation that a coin set."""
    from experiments.identify.stages.directions import random_nuisances

    rng = np.random.default_rng(0)
    a = rng.standard_normal((400, 64)) * np.linspace(3, 0.2, 64)
    sigma = a.T @ a / len(a)
    v_star = unit(rng.standard_normal(64))
    drawn = random_nuisances(sigma, v_star, 40, 4, 0, "x")
    cross = [float(v_star @ sigma @ u) for u, b in drawn if b == 1]
    assert np.std(cross) > 0.05 * np.sqrt(float(v_star @ sigma @ v_star))


def test_the_validation_geometry_is_the_unit_diffmean_of_texts_no_builder_saw():
    """``identify.geometry_texts: validation`` (v4): each concept's check direction is the
    unit diffmean of its validation texts, which every builder leaves out; it needs AUROC
    on the test texts only, so the detector never ranks the texts geometry is read on."""
    from pydantic import ValidationError

    from experiments.config import load_config
    from experiments.identify.stages.data import ConceptData, StudyData, build_directions

    config = load_config(
        "configs/identify.yaml",
        ["identify.geometry_texts=validation", "identify.auroc_texts=test"],
    )
    rng = np.random.default_rng(3)
    concepts = {}
    for k, name in enumerate(("a.n.01", "b.n.01")):
        x = rng.standard_normal((20, 8))
        y = np.array([1] * 10 + [0] * 10)
        x[y == 1, k] += 3.0  # each concept's validation contrast along its own axis
        test = (rng.standard_normal((20, 8)), y)
        concepts[name] = ConceptData(name, training_set(16, seed=k), (x, y), test)
    data = StudyData(concepts, rng.standard_normal((30, 8)))
    found = build_directions(config, data)
    for k, (name, d) in enumerate(concepts.items()):
        x, y = d.validation
        expected = unit(x[y == 1].mean(axis=0) - x[y == 0].mean(axis=0))
        np.testing.assert_allclose(found.validation[name], expected)
        assert np.argmax(np.abs(found.validation[name])) == k
    plain = build_directions(load_config("configs/identify.yaml"), data)
    assert plain.validation == {}
    with pytest.raises((ValidationError, ValueError), match="auroc_texts: test"):
        IdentifyConfig(geometry_texts="validation", auroc_texts="held_out")
