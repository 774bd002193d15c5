"""Properties of Δ = cos(text, core) − cos(text, negative) and its helpers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from metrics.semantic import (
    Centroids,
    build_centroids,
    cosine,
    score,
    steering_label,
)

PROPS = settings(derandomize=True, deadline=None, max_examples=60)
DIM = 8

finite = st.floats(-10, 10, allow_nan=False, allow_infinity=False)
vectors = arrays(np.float64, DIM, elements=finite).filter(lambda v: np.linalg.norm(v) > 1e-3)
positive_scale = st.floats(1e-3, 1e3, allow_nan=False)


def make_centroids(core: np.ndarray, boundary: np.ndarray, negative: np.ndarray) -> Centroids:
    return build_centroids(
        {"core": core[None, :], "boundary": boundary[None, :], "negative": negative[None, :]},
        {"core": ["c"], "boundary": ["b"], "negative": ["n"]},
    )


@PROPS
@given(text=vectors, core=vectors, boundary=vectors, negative=vectors)
def test_delta_is_antisymmetric_in_core_and_negative(text, core, boundary, negative):
    forward = score(text, make_centroids(core, boundary, negative)).delta
    swapped = score(text, make_centroids(negative, boundary, core)).delta
    np.testing.assert_allclose(forward, -swapped, atol=1e-12)


@PROPS
@given(text=vectors, core=vectors, negative=vectors)
def test_delta_is_bounded(text, core, negative):
    delta = score(text, make_centroids(core, core, negative)).delta
    assert np.all(delta >= -2.0) and np.all(delta <= 2.0)


@PROPS
@given(text=vectors, core=vectors, negative=vectors, scale=positive_scale)
def test_delta_invariant_to_positive_scaling_of_text(text, core, negative, scale):
    centroids = make_centroids(core, core, negative)
    np.testing.assert_allclose(
        score(text, centroids).delta, score(text * scale, centroids).delta, atol=1e-9
    )


@PROPS
@given(core=vectors, negative=vectors)
def test_core_direction_has_positive_delta(core, negative):
    assume(cosine(core, negative) < 1 - 1e-6)  # core and negative point different ways
    centroids = make_centroids(core, negative, negative)
    assert score(core, centroids).delta[0] > 0


def test_centroids_are_unnormalised_means_and_keep_texts():
    core = np.array([[2.0, 0.0], [0.0, 2.0]])
    built = build_centroids(
        {"core": core, "boundary": core, "negative": -core},
        {"core": ["a", "b"], "boundary": ["c"], "negative": ["d"]},
    )
    np.testing.assert_allclose(built.core, [1.0, 1.0])
    np.testing.assert_allclose(built.negative, [-1.0, -1.0])
    assert built.texts["core"] == ("a", "b")
    assert built.dim == 2


def test_build_centroids_rejects_missing_or_empty_sets():
    with pytest.raises(ValueError, match="Missing"):
        build_centroids({"core": np.ones((1, 3))}, {})
    with pytest.raises(ValueError, match="non-empty"):
        build_centroids(
            {"core": np.ones((1, 3)), "boundary": np.ones((1, 3)), "negative": np.ones((0, 3))},
            {},
        )


def test_score_returns_every_similarity_and_checks_dimension():
    centroids = make_centroids(np.array([1.0, 0.0]), np.array([1.0, 1.0]), np.array([0.0, 1.0]))
    scores = score(np.array([[1.0, 0.0], [0.0, 3.0]]), centroids)
    np.testing.assert_allclose(scores.core_sim, [1.0, 0.0])
    np.testing.assert_allclose(scores.neg_sim, [0.0, 1.0])
    np.testing.assert_allclose(scores.boundary_sim, [np.sqrt(0.5), np.sqrt(0.5)])
    np.testing.assert_allclose(scores.delta, [1.0, -1.0])
    assert len(scores) == 2
    with pytest.raises(ValueError, match="dim"):
        score(np.ones((1, 3)), centroids)


def test_cosine_refuses_zero_vectors():
    with pytest.raises(ValueError, match="zero"):
        cosine(np.zeros(3), np.ones(3))


@pytest.mark.parametrize(
    ("delta", "label"),
    [
        (0.16, "toward_core"),
        (0.15, "neutral"),
        (0.0, "neutral"),
        (-0.15, "neutral"),
        (-0.16, "toward_negative"),
    ],
)
def test_steering_label_bands(delta, label):
    assert steering_label(delta) == label


def test_steering_label_rejects_nan():
    with pytest.raises(ValueError):
        steering_label(float("nan"))


# ---------------------------------------------------------------------------- cross-concept Δ


@st.composite
def concept_sets(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    n_texts, n_concepts = draw(st.integers(1, 12)), draw(st.integers(1, 6))
    rng = np.random.default_rng(seed)
    texts = rng.normal(size=(n_texts, DIM)).astype(np.float32)
    centroids = {
        f"c{k}": make_centroids(*(rng.normal(size=DIM) for _ in range(3)))
        for k in range(n_concepts)
    }
    return texts, centroids


@PROPS
@given(concept_sets())
def test_cross_deltas_on_the_cpu_are_score_per_concept_bit_for_bit(case):
    from metrics.semantic import cross_deltas

    texts, centroids = case
    got = cross_deltas(texts, centroids, "cpu")
    assert list(got) == list(centroids)
    for key, c in centroids.items():
        assert np.array_equal(got[key], score(texts, c).delta)
    assert all(np.array_equal(got[k], v) for k, v in cross_deltas(texts, centroids).items())


@PROPS
@given(concept_sets())
def test_the_stacked_products_agree_with_score_per_concept(case):
    """The CUDA path's arithmetic (two float64 matrix products), run here with torch on
    the CPU: the same Δ to 1e-12."""
    from metrics.semantic import _cross_deltas_torch

    texts, centroids = case
    got = _cross_deltas_torch(texts, centroids, "cpu")
    for key, c in centroids.items():
        np.testing.assert_allclose(got[key], score(texts, c).delta, rtol=0, atol=1e-12)


def test_the_stacked_products_refuse_a_zero_vector_like_cosine():
    from metrics.semantic import _cross_deltas_torch

    c = make_centroids(np.ones(DIM), np.ones(DIM), np.ones(DIM))
    with pytest.raises(ValueError, match="zero vector"):
        _cross_deltas_torch(np.zeros((2, DIM)), {"a": c}, "cpu")
    with pytest.raises(ValueError, match="dim 3"):
        _cross_deltas_torch(np.ones((2, 3)), {"a": c}, "cpu")
    assert _cross_deltas_torch(np.ones((2, DIM)), {}, "cpu") == {}


@pytest.mark.cuda
def test_cross_deltas_on_a_gpu_agree_with_the_cpu():
    from metrics.semantic import cross_deltas

    rng = np.random.default_rng(3)
    texts = rng.normal(size=(50, DIM))
    centroids = {
        f"c{k}": make_centroids(*(rng.normal(size=DIM) for _ in range(3))) for k in range(40)
    }
    cpu, gpu = cross_deltas(texts, centroids, "cpu"), cross_deltas(texts, centroids, "cuda")
    for key in centroids:
        np.testing.assert_allclose(gpu[key], cpu[key], rtol=0, atol=1e-12)
