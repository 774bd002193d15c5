"""Nulls from the model's own distribution: neutral-split diffmeans, other concepts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.nulls import neutral_split_directions, other_concept_directions


@settings(derandomize=True, deadline=None, max_examples=25)
@given(st.integers(4, 40), st.integers(1, 6), st.integers(0, 2**16))
def test_neutral_splits_are_unit_diffmeans_of_disjoint_halves(n, k, seed):
    rng = np.random.default_rng(seed)
    acts = rng.normal(size=(n, 8))
    nulls = neutral_split_directions(acts, k, seed, "herb.n.01")
    assert len(nulls) == k
    for d in nulls:
        assert np.linalg.norm(d) == pytest.approx(1.0)
    again = neutral_split_directions(acts, k, seed, "herb.n.01")
    assert all(np.array_equal(a, b) for a, b in zip(nulls, again, strict=True))
    other = neutral_split_directions(acts, k, seed, "shrub.n.01")
    assert not np.array_equal(nulls[0], other[0])


def test_a_neutral_split_is_the_diffmean_of_its_halves():
    """Exchangeable halves of points spread along one axis give a direction along it, and
    a draw is the same whatever k (draw j depends on j only)."""
    rng = np.random.default_rng(0)
    acts = np.outer(rng.normal(size=20), np.eye(5)[2]) + 1e-3 * rng.normal(size=(20, 5))
    first = neutral_split_directions(acts, 1, 3, "a")[0]
    assert abs(first[2]) > 0.99
    assert np.array_equal(neutral_split_directions(acts, 4, 3, "a")[0], first)
    with pytest.raises(ValueError, match="at least 4"):
        neutral_split_directions(acts[:3], 1, 0, "a")


def test_other_concepts_exclude_the_concept_and_ignore_mapping_order():
    rng = np.random.default_rng(1)
    dirs = {f"c{i}": rng.normal(size=6) for i in range(10)}
    picked = other_concept_directions(dirs, "c3", 4, seed=0)
    assert len(picked) == 4 and "c3" not in [c for c, _ in picked]
    assert len({c for c, _ in picked}) == 4
    for c, d in picked:
        assert np.allclose(d, dirs[c] / np.linalg.norm(dirs[c]))
    shuffled = dict(reversed(list(dirs.items())))
    assert [c for c, _ in other_concept_directions(shuffled, "c3", 4, seed=0)] == [
        c for c, _ in picked
    ]
    choices = {tuple(c for c, _ in other_concept_directions(dirs, "c3", 2, s)) for s in range(8)}
    assert len(choices) > 1
    with pytest.raises(ValueError, match="9 others"):
        other_concept_directions(dirs, "c3", 10, seed=0)
