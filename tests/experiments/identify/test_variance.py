"""The variance components the simulation takes from a run (identify/estimation/variance.py): a
random-effects pool of each concept's within-cell slopes recovers the toy's noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.identify.estimation.compare import read_directions
from experiments.identify.estimation.variance import components


def _study(n_concepts: int, slope_sd: float, within_sd: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_concepts):
        slope = 0.5 + slope_sd * rng.standard_normal()
        for level in (30, 45, 60):
            for band in range(4):
                base = rng.standard_normal()  # a cell's own level: absorbed
                for k in range(3):
                    auroc = 0.8 + 0.05 * rng.standard_normal()
                    rows.append({
                        "concept": f"c{c}", "manipulation": "isocos", "level": level,
                        "seed": band + 4 * k, "nuisance_band": band, "auroc": auroc,
                        "effect": base + slope * auroc + within_sd * rng.standard_normal(),
                    })  # fmt: skip
        rows.append({"concept": f"c{c}", "manipulation": "reference", "level": 0,
                     "auroc": 0.9, "effect": 9.0})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_components_recover_the_slope_spread_and_the_noise() -> None:
    got = components(_study(60, slope_sd=1.0, within_sd=0.05, seed=0))
    assert got.n_concepts == 60 and got.rows_per_concept == 36
    assert got.within_sd == pytest.approx(0.05, rel=0.15)
    assert got.slope_sd == pytest.approx(1.0, rel=0.25)
    assert got.auroc_within_sd == pytest.approx(0.05, rel=0.2)
    assert got.pooled_slope == pytest.approx(0.5, abs=4 * got.pooled_se)
    none = components(_study(60, slope_sd=0.0, within_sd=0.05, seed=1))
    assert none.slope_sd < 0.3 and none.i2 < 0.5


def _built(n_concepts: int, slope_sd: float, within_sd: float, seed: int) -> pd.DataFrame:
    """The directions people build, per concept, beside iso-cos rows they must ignore."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_concepts):
        slope = 0.5 + slope_sd * rng.standard_normal()
        base = rng.standard_normal()  # the concept's own level: absorbed
        for m, n in (("reference", 1), ("logistic", 4), ("shrinkage", 5), ("size", 3)):
            for k in range(n):
                auroc = 0.8 + 0.1 * rng.standard_normal()
                rows.append({
                    "concept": f"c{c}", "manipulation": m, "level": float(k), "auroc": auroc,
                    "effect": base + slope * auroc + within_sd * rng.standard_normal(),
                })  # fmt: skip
        rows.append({"concept": f"c{c}", "manipulation": "isocos", "level": 45.0,
                     "auroc": 0.1, "effect": -9.0})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_practitioners_components_come_from_the_directions_people_build() -> None:
    got = components(_built(80, slope_sd=1.0, within_sd=0.05, seed=0), population="practitioner")
    assert got.n_concepts == 80 and got.rows_per_concept == 13  # the iso-cos row left out
    assert got.within_sd == pytest.approx(0.05, rel=0.15)
    assert got.slope_sd == pytest.approx(1.0, rel=0.25)
    assert got.auroc_within_sd == pytest.approx(0.1, rel=0.2)
    with pytest.raises(ValueError, match="population 'iso' is not one of"):
        components(_built(3, 1.0, 0.05, 0), population="iso")
    with pytest.raises(ValueError, match="2 concepts have a practitioner's slope"):
        components(_built(2, 1.0, 0.05, 0), population="practitioner")


def test_too_few_concepts_is_an_error_that_says_why(tmp_path) -> None:
    with pytest.raises(ValueError, match="2 concepts have an equal-geometry slope"):
        components(_study(2, 1.0, 0.05, 0))
    with pytest.raises(FileNotFoundError, match=r"no directions\.csv at"):
        read_directions(tmp_path)


def test_a_run_with_split_half_errors_gives_aurocs_reliability_and_the_toy_takes_it(
    tmp_path,
) -> None:
    """AUROC's within-cell reliability from ``auroc_error_within`` (1 − error / spread),
    kept through a saved 'measured' block, and the toy then measures AUROC with the
    error that reliability leaves (sd √(1 − rel) of the measured spread)."""
    import json
    from dataclasses import replace

    from experiments.config import load_config
    from experiments.identify.estimation.variance import components_from_json
    from experiments.identify.simulation.design import measured_toy

    frame = _study(40, slope_sd=0.5, within_sd=0.05, seed=2)
    cells = frame["manipulation"] == "isocos"
    # a quarter of the within-cell variance (0.05² (1 − 1/3) per row) is error
    frame.loc[cells, "auroc_error_within"] = 0.25 * 0.05**2 * (1 - 1 / 3)
    got = components(frame)
    assert got.auroc_reliability == pytest.approx(0.75, abs=0.05)
    saved = tmp_path / "power.json"
    saved.write_text(json.dumps({"measured": got.to_dict()}))
    assert components_from_json(saved) == got
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="no 'measured' block"):
        components_from_json(tmp_path / "bad.json")
    v3 = load_config(  # the development grid: the random iso-cos draws
        "configs/identify-v3.yaml", ["identify.isocos_degrees=[30, 45, 60, 90]"], "identify", []
    ).identify
    toy = measured_toy(v3, replace(got, auroc_reliability=0.36))
    assert toy["auroc_measurement_sd"] == pytest.approx(0.8 * got.auroc_within_sd)
    assert toy["random_signal_sd"] > 0 and toy["auroc_spread_sd"] > 0
    assert "auroc_measurement_sd" not in measured_toy(v3, replace(got, auroc_reliability=None))
