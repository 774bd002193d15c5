"""steering.directions: the registry of direction sources and the format-free source."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.directions import (
    DirectionContext,
    get_direction_source,
    project_out,
)
from steering.probes import LinearProbe, ProbeError


def probe(weight, diffmean=None) -> LinearProbe:
    return LinearProbe(
        concept="herb.n.01",
        weight=np.asarray(weight, dtype=np.float64),
        bias=0.0,
        layer=9,
        model_id="m",
        train_spec="1x1x1",
        seed=0,
        diffmean=None if diffmean is None else np.asarray(diffmean, dtype=np.float64),
    )


def test_the_three_sources_are_registered():
    for name in ("classifier", "diffmean", "classifier_deformat"):
        get_direction_source(name)
    with pytest.raises(ProbeError, match="unknown direction source 'nope'") as info:
        get_direction_source("nope")
    assert "'classifier', 'classifier_deformat', 'diffmean'" in str(info.value)


def test_sources_differ_as_documented():
    p = probe([3.0, 4.0, 0.0], diffmean=[0.0, 1.0, 0.0])
    axis = np.array([1.0, 0.0, 0.0])
    ctx = DirectionContext(format_axis=axis)
    np.testing.assert_allclose(get_direction_source("classifier")(p, ctx), [0.6, 0.8, 0.0])
    np.testing.assert_allclose(get_direction_source("diffmean")(p, ctx), [0.0, 1.0, 0.0])
    np.testing.assert_allclose(get_direction_source("classifier_deformat")(p, ctx), [0, 1, 0])


def test_deformat_needs_the_format_axis():
    with pytest.raises(ProbeError, match="format axis"):
        get_direction_source("classifier_deformat")(probe([1.0, 2.0]), DirectionContext())
    with pytest.raises(ProbeError, match="zero"):  # a direction that is all format
        get_direction_source("classifier_deformat")(
            probe([2.0, 0.0]), DirectionContext(format_axis=np.array([5.0, 0.0]))
        )


@settings(derandomize=True, deadline=None, max_examples=50)
@given(seed=st.integers(0, 2**32 - 1), dim=st.integers(2, 64))
def test_project_out_leaves_a_unit_vector_orthogonal_to_the_axis(seed, dim):
    rng = np.random.default_rng(seed)
    vector, axis = rng.normal(size=dim), rng.normal(size=dim) * 100
    rest = project_out(vector, axis)
    assert np.linalg.norm(rest) == pytest.approx(1.0)
    assert abs(rest @ axis) / np.linalg.norm(axis) < 1e-9
    assert rest @ vector > 0  # what remains still points the same way
