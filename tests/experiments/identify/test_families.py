"""The primary taken apart by family (identify/estimation/families.py) on toys with a known
answer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.identify.estimation.families import (
    between_family_share,
    decompose,
    geometry,
    markdown,
    numerator_shares,
)

FAMILIES = {
    "reference": ["reference"],
    "logistic": ["logistic:0.01", "logistic:1"],
    "shrinkage": ["shrinkage:0.1", "shrinkage:0.01"],
    "size": ["size:1x1x1", "size:2x2x2", "size:5x5x5"],
}


@pytest.fixture(autouse=True)
def one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def _noisy_estimates(seed: int, n_concepts: int = 40) -> pd.DataFrame:
    """The v3 reading planted: each direction is the concept's true one plus estimation
    noise that shrinks with its training texts; AUROC and the effect both fall with the
    noise (so the size family makes the slope), while among the full-data families AUROC
    moves with the builder and the effect does not."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_concepts):
        level = rng.normal()
        for family, ids in FAMILIES.items():
            for i, d in enumerate(ids):
                noise = {"size:1x1x1": 0.6, "size:2x2x2": 0.35, "size:5x5x5": 0.15}.get(d, 0.0)
                builder = {"shrinkage": 0.2, "logistic": 0.05}.get(family, 0.0) + 0.02 * i
                auroc = 0.75 + builder - 0.3 * noise + 0.01 * rng.normal()
                effect = level + 1.0 - 1.0 * noise + 0.02 * rng.normal()
                cos = 1.0 - noise + 0.02 * rng.normal()
                rows.append({"concept": f"c{c}", "manipulation": family, "direction": d,
                             "auroc": auroc, "effect": effect, "cos_half": cos})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_size_family_carries_a_slope_it_plants_and_the_rest_read_nothing() -> None:
    frame = _noisy_estimates(0)
    d = decompose(frame, n_boot=199, seed=0, hypothesis="positive", margin=0.25)
    shares = d.numerator_share_by_family
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["size"] == max(shares.values()) and shares["size"] > 0.5
    by = {r.name: r for r in d.refits}
    assert by["all (the primary)"].verdict == "supported"
    without = by["without size"].fit
    assert without.low < 0 < without.high  # among full-data builders AUROC predicts nothing
    assert by["without size"].verdict in {"no_practical_effect", "inconclusive"}
    assert by["within size alone"].verdict == "supported"
    assert "within reference alone" not in by  # v*: one direction per concept, no slope
    assert d.geometry is not None
    assert d.geometry.r2_cos.estimate > d.geometry.r2_auroc.estimate
    text = "\n".join(markdown(d))
    assert "without size" in text and "size 7" in text


def test_between_family_share_is_one_when_auroc_only_moves_between_families() -> None:
    rows = [
        {"concept": c, "manipulation": f, "direction": f"{f}:{i}", "auroc": a, "effect": 0.0}
        for c in ("a", "b")
        for f, a in (("reference", 0.7), ("logistic", 0.8), ("shrinkage", 0.99))
        for i in range(2)
    ]
    assert between_family_share(pd.DataFrame(rows)) == pytest.approx(1.0)


def test_the_geometry_is_read_on_the_validation_texts_where_a_run_has_them() -> None:
    frame = _noisy_estimates(1, n_concepts=5)
    half = geometry(frame, n_boot=99, seed=0)
    assert half is not None and half.column == "cos_half"
    both = frame.assign(cos_validation=frame["cos_half"] + 0.01)
    found = geometry(both, n_boot=99, seed=0)
    assert found is not None and found.column == "cos_validation"
    assert geometry(frame.drop(columns="cos_half"), n_boot=99, seed=0) is None


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 12))
def test_numerator_shares_sum_to_one_and_follow_the_rows(seed: int, n: int) -> None:
    """For any table, the shares by family and by direction sum to 1, and a family's share
    is the sum of its directions' shares."""
    rng = np.random.default_rng(seed)
    frame = _noisy_estimates(seed, n_concepts=n)
    frame["effect"] = rng.normal(size=len(frame))
    by_family = numerator_shares(frame, "manipulation")
    by_direction = numerator_shares(frame, "direction")
    assert sum(by_family.values()) == pytest.approx(1.0)
    for family, ids in FAMILIES.items():
        assert by_family[family] == pytest.approx(sum(by_direction[d] for d in ids))
