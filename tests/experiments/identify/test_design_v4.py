"""identify v4's design gate: the geometry-only class and co-primaries read by Holm.

Seeded and small (few toys, few concepts, 99 bootstrap replicates). The gate's own
numbers are the committed table (``bench/identify_design_v4_n294.json``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.config import load_config
from experiments.identify.estimation.variance import FULL_DATA, PRACTITIONER, practitioner_truth
from experiments.identify.heldout.prereg import primaries
from experiments.identify.simulation import simulate as sim
from experiments.identify.simulation.design import (
    design_failures,
    holm_readings,
    power_curve,
    primary_of,
    simulate,
)
from steering.nulls import seeded_rng

V4 = load_config("configs/identify-v4.yaml", [], "identify", [])
PRIMARY = primary_of(V4)  # P1 and its co-primary P2, from the draft pre-registration


@pytest.fixture(autouse=True)
def one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture
def low_noise(monkeypatch):
    monkeypatch.setitem(sim.TOY, "slope_sd", 0.0)
    monkeypatch.setitem(sim.TOY, "effect_sd", 0.03)


def _within(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """The columns less their concept means (the practitioner's comparison)."""
    block = frame[columns].astype(float)
    return (block - block.groupby(frame["concept"]).transform("mean")).to_numpy()


def test_v4s_primary_block_has_two_co_primaries_read_by_holm() -> None:
    specs = primaries(PRIMARY)
    assert [s.name for s in specs] == ["P1", "P2"]
    assert [s.estimator for s in specs] == ["practitioner", "practitioner_full_data"]
    assert PRIMARY.multiplicity == "holm" and PRIMARY.alpha == 0.05


def test_the_gate_simulates_the_concepts_v4_scores() -> None:
    """v4 scores v3's held-out set after its first 300 (identify.offset): 294 concepts,
    not the 594 of the whole set."""
    from experiments.identify.simulation.design import heldout_count
    from experiments.identify.study import with_concepts

    assert heldout_count(V4) == 294
    heldout = V4.model_copy(
        update={"identify": V4.identify.model_copy(update={"concept_set": "heldout"})}
    )
    assert len(with_concepts(heldout)[0].concepts.synsets or []) == heldout_count(V4)


def test_geometry_only_truths_are_what_alignment_predicts_and_p1s_is_positive() -> None:
    """Steering follows alignment only, yet detection predicts it among the built
    directions (a predictive primary's truth is not 0): the diffmeans from few texts
    detect and steer worse together; whitening detects best and steers like v*."""
    toy = sim.toy_directions(
        V4.identify, sim.CLASSES["geometry_only"], seeded_rng(0, "g"), 0.0, 300
    )
    p1, p2 = practitioner_truth(toy, PRACTITIONER), practitioner_truth(toy, FULL_DATA)
    assert 0.3 < p1 < 0.6  # v3's pooled estimate: +0.47
    assert -0.3 < p2 < 0.1 and p2 < p1  # v3's without size: -0.14
    built = toy[toy["manipulation"].isin(PRACTITIONER)]
    means = built.groupby("manipulation")["auroc_true"].mean()
    assert means.idxmax() == "shrinkage" and means.idxmin() == "size"  # v3's order
    # the read-out spreads the full-data directions' AUROC as v3 did (sd 0.12 in a
    # concept), the toy's own geometry (flat) far less
    flat = sim.toy_directions(V4.identify, sim.CLASSES["flat"], seeded_rng(0, "g"), 0.0, 300)
    spread = {
        name: float(np.std(_within(f[f["manipulation"].isin(FULL_DATA)], ["auroc"])))
        for name, f in (("readout", toy), ("flat", flat))
    }
    assert 0.09 < spread["readout"] < 0.16 and spread["flat"] < spread["readout"] / 2


def test_geometry_only_has_no_auroc_effect_beyond_alignment(low_noise) -> None:
    """Within concept, beside the alignment that steers, AUROC predicts nothing: exactly
    for the effect's mean, and within noise for the effect itself."""
    toy = sim.toy_directions(
        V4.identify, sim.CLASSES["geometry_only"], seeded_rng(1, "g"), 0.0, 200
    )
    toy = toy.assign(steered=toy["steer"] * toy["alignment"])
    x = _within(toy, ["auroc", "steered"])
    for outcome, tolerance in (("effect_mean", 1e-9), ("effect", 0.02)):
        y = _within(toy, [outcome])[:, 0]
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        assert abs(coef[0]) < tolerance, (outcome, coef)
        assert coef[1] == pytest.approx(sim.READOUT["alignment_gain"], rel=0.02)
    bare = practitioner_truth(toy, PRACTITIONER)
    assert bare > 0.3  # what the bare slope reads without alignment beside it


def test_the_geometry_only_class_needs_its_read_out() -> None:
    with pytest.raises(ValueError, match="readout"):
        sim.Confound("alignment without the read-out", shape="alignment")


def test_the_co_primary_table_reads_both_primaries_by_holm() -> None:
    classes = ["flat_readout", "geometry_only"]
    rows = simulate(V4.identify, PRIMARY, toys=3, n_boot=99, n_concepts=20, classes=classes,
                    primary_only=True)  # fmt: skip
    assert {(r["estimand"], r["class"]) for r in rows} == {
        (p, c) for p in ("P1", "P2") for c in classes
    }
    for r in rows:
        for arm in ("null", "planted"):
            assert sum(r[f"verdicts_{arm}"].values()) == pytest.approx(1.0)
            assert sum(r[f"holm_step_{arm}"].values()) == pytest.approx(1.0)
            assert set(r[f"holm_step_{arm}"]) == {"1", "2", "unsettled"}
        assert 0.95 <= r["confidence_null"] <= 0.975  # Holm's levels for two primaries
        assert r["n_null"] == 3 and r["planted_effect"] == 0.25
    by = {(r["estimand"], r["class"]): r for r in rows}
    assert by[("P1", "flat_readout")]["truth"] == pytest.approx(0.0, abs=1e-9)
    assert by[("P2", "flat_readout")]["truth"] == pytest.approx(0.0, abs=1e-9)
    assert by[("P1", "geometry_only")]["truth"] > 0.2
    assert set(by[("P2", "geometry_only")]["weights"]) == set(FULL_DATA)


def test_a_tables_row_is_holms_reading_of_its_toy() -> None:
    """With one toy per arm, the row's estimate and verdict are those of Holm's procedure
    run on that toy by hand (``multiplicity.holm`` over ``primary.primary_result``)."""
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.multiplicity import holm
    from experiments.identify.estimation.primary import primary_result

    rows = simulate(V4.identify, PRIMARY, toys=1, n_boot=99, n_concepts=15,
                    classes=["geometry_only"], primary_only=True)  # fmt: skip
    frame = sim.toy_directions(
        V4.identify, sim.CLASSES["geometry_only"],
        seeded_rng(0, "design", "geometry_only", "null", 0), 0.0, 15,
    )  # fmt: skip
    tables = StudyTables(frame)
    by_hand = holm(primaries(PRIMARY), lambda s, c: primary_result(tables, s, 99, 0, c), 0.05)
    assert [r.verdict for r in by_hand] == [
        r.verdict for r in holm_readings(frame, primaries(PRIMARY), 0.05, 99, 0)
    ]
    for row, reading in zip(rows, by_hand, strict=True):
        assert row["estimand"] == reading.name
        assert row["verdicts_null"][reading.verdict] == 1.0
        estimate = reading.result.slope.estimate
        assert row["bias"] == pytest.approx(estimate - row["truth"], abs=1e-12)


def test_power_rises_with_concepts(monkeypatch) -> None:
    """P2's equivalence reading (no practical effect with nothing planted) and P1's
    'supported' with 0.25 planted both come more often with more concepts (the concepts'
    slope spread a quarter of the toy's, so that 60 concepts are enough)."""
    monkeypatch.setitem(sim.TOY, "slope_sd", 0.3)
    monkeypatch.setitem(sim.TOY, "effect_sd", 0.1)
    curve = power_curve(V4.identify, PRIMARY, [6, 60], toys=6, n_boot=99, primary_only=True)
    at = {(r["primary"], r["class"], r["n_concepts"]): r for r in curve}
    assert {r["class"] for r in curve} == {"flat_readout", "flat"}
    for p in ("P1", "P2"):
        small, large = at[(p, "flat_readout", 6)], at[(p, "flat_readout", 60)]
        assert large["width"] < small["width"] / 2
    assert at[("P2", "flat_readout", 60)]["no_practical_0"] >= (
        at[("P2", "flat_readout", 6)]["no_practical_0"] + 0.5
    )
    assert at[("P1", "flat_readout", 60)]["power"] >= at[("P1", "flat_readout", 6)]["power"] + 0.5


def test_a_known_table_gives_the_curve_it_would_compute() -> None:
    kw = {"toys": 2, "n_boot": 49, "primary_only": True}
    known = simulate(V4.identify, PRIMARY, n_concepts=8, classes=["flat_readout"], **kw)
    assert power_curve(V4.identify, PRIMARY, [8], known={8: known}, **kw) == power_curve(
        V4.identify, PRIMARY, [8], **kw
    )


def test_the_gate_holds_every_co_primary() -> None:
    def row(name: str, coverage: float) -> dict:
        return {"estimand": name, "class": "geometry_only", "coverage": coverage,
                "n_null": 50, "supported_0": 0.0, "truth": -0.1}  # fmt: skip

    assert design_failures([row("P1", 0.95), row("P2", 0.92)], PRIMARY) == []
    (failure,) = design_failures([row("P1", 0.95), row("P2", 0.8)], PRIMARY)
    assert failure.startswith("geometry_only: the P2's interval covers its truth (-0.10) in 80%")
    assert design_failures([row("P1", 0.95)], PRIMARY) == ["the table has no 'P2' rows"]


def test_the_command_writes_the_co_primary_table(tmp_path, monkeypatch) -> None:
    """``identify --simulate`` on v4's config end to end at a toy's size (the held-out
    count replaced by 10 concepts): both primaries, Holm's alpha, each primary's power in
    its classes, the gate, and the csv with the verdicts flattened."""
    import json

    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.identify.simulation import design

    monkeypatch.setattr(design, "heldout_count", lambda config: 10)
    monkeypatch.setattr(design, "CLASSES", {k: sim.CLASSES[k] for k in ("flat", "flat_readout")})
    monkeypatch.setattr(sim, "CLASSES", design.CLASSES)
    args = ["identify", "--config", "configs/identify-v4.yaml", "--simulate", "--toys", "2",
            "--primary-only", "--power-at", "6,10", "--json",
            "--set", f"identify.results_dir={tmp_path}"]  # fmt: skip
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)  # the progress lines go to stderr
    assert [p["name"] for p in result["primaries"]] == ["P1", "P2"]
    assert result["primaries"][1]["families"] == list(FULL_DATA)
    assert result["alpha"] == 0.05 and result["n_concepts"] == 10
    assert result["power"]["P2"]["class"] == "flat_readout"
    assert set(result["power"]["P2"]["also"]) == {"flat"}
    assert {(r["primary"], r["n_concepts"]) for r in result["power_curve"]} == {
        (p, n) for p in ("P1", "P2") for n in (6, 10)
    }
    csv = pd.read_csv(result["files"][1])
    assert {"verdicts_null:no_practical_effect", "holm_step_null:1", "weight:shrinkage"} <= set(
        csv.columns
    )
