"""``identify --simulate``: the configured grid run through toy studies with known answers.

Seeded and small. Where a test needs the failure to be unmistakable with a dozen toys it
uses the low-noise toy (no random AUROC slope across concepts, direction-level effect
noise 0.03 as in ``simulate.toy_study``), said in its name; the calibrated toy's numbers
are the committed table (``bench/identify_design_v2.json``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.config import load_config
from experiments.identify.simulation import simulate as sim
from experiments.identify.simulation.design import (
    check_design,
    estimands,
    family_weights,
    primary_of,
    simulate,
)
from experiments.identify.stages.manipulations import direction_grid, is_control
from metrics.intervals import Interval
from steering.nulls import seeded_rng

V2 = load_config("configs/identify-v2.yaml", [], "identify", [])
PRIMARY = primary_of(V2)
V3 = load_config("configs/identify-v3.yaml", [], "identify", [])
# the v3 development grid: the confirmatory one with the random iso-cos draws
V3_DEV = load_config(
    "configs/identify-v3.yaml", ["identify.isocos_degrees=[30, 45, 60, 90]"], "identify", []
)
# v3's equal-geometry estimand as a primary: what the v3 design was first checked for
EQUAL_GEOMETRY = primary_of(V3).model_copy(
    update={"estimator": "equal_geometry", "estimand": "equal_geometry"}
)
ESTIMANDS = {
    "primary", "flexible", "linear_cos", "matched_pairs", "isocos_pooled", "equal_geometry",
    "equal_norm_cos_per_concept",
}  # fmt: skip


@pytest.fixture(autouse=True)
def one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture
def low_noise(monkeypatch):
    monkeypatch.setitem(sim.TOY, "slope_sd", 0.0)
    monkeypatch.setitem(sim.TOY, "effect_sd", 0.03)


def test_the_primary_is_v2s_preregistered_one() -> None:
    assert PRIMARY.estimator == "flexible_cos"
    assert PRIMARY.control == ["cos_ref", "log_kl"]


def test_a_toy_has_the_configured_grid_and_the_columns_the_estimators_read() -> None:
    toy = sim.toy_directions(V2.identify, sim.CLASSES["none"], seeded_rng(0, "t"), 0.0, 3)
    ids = [s.id for s in direction_grid(V2.identify) if not is_control(s.manipulation)]
    assert toy.groupby("concept")["direction"].apply(list).map(lambda d: d == ids).all()
    assert {"concept", "direction", "manipulation", "level", "seed", "cos_ref", "auroc", "kl",
            "effect"} <= set(toy.columns)  # fmt: skip
    iso = toy[toy["manipulation"] == "isocos"]
    assert sorted(iso["level"].unique()) == [30.0, 45.0, 60.0, 90.0]
    assert iso.groupby("level")["seed"].nunique().eq(8).all()  # 8 graded nuisances per angle
    np.testing.assert_allclose(iso["cos_ref"], np.cos(np.deg2rad(iso["level"])))
    # at one angle the nuisances spread AUROC: what the iso-cos design is for
    assert iso[iso["level"] == 45].groupby("seed")["auroc_true"].mean().std() > 0.05


def test_same_seed_same_toy() -> None:
    a = sim.toy_directions(V2.identify, sim.CLASSES["push"], seeded_rng(1, "x"), 0.0, 3)
    b = sim.toy_directions(V2.identify, sim.CLASSES["push"], seeded_rng(1, "x"), 0.0, 3)
    assert a.equals(b)


def test_a_manipulation_without_toy_geometry_is_refused() -> None:
    with pytest.raises(ValueError, match="no toy geometry"):
        sim._nuisance("brand_new", None)


def test_the_table_has_every_estimand_and_class() -> None:
    rows = simulate(V2.identify, PRIMARY, toys=2, n_boot=49, n_concepts=6)
    pairs = {(r["estimand"], r["class"]) for r in rows}
    angles = {f"isocos_bare_{a}" for a in ("30", "45", "60")}
    assert pairs == {(e, c) for e in ESTIMANDS | angles for c in sim.CLASSES}
    for r in rows:
        assert r["n_null"] + r["not_evaluable"] == 2 and r["n_planted"] <= 2
        assert sum(r["weights"].values()) == pytest.approx(1.0, abs=1e-3)


def test_low_noise_pushes_break_the_primary_that_linear_toys_do_not(low_noise) -> None:
    """The known failure (the issue): with no AUROC effect, each nuisance type's own push,
    aligned with its AUROC, reads as detection under the v2 primary; a linear effect
    does not."""
    kw = {"toys": 10, "n_boot": 99, "n_concepts": 10, "classes": ["none", "push_aligned"]}
    rows = {(r["estimand"], r["class"]): r for r in simulate(V2.identify, PRIMARY, **kw)}
    none, push = rows[("primary", "none")], rows[("primary", "push_aligned")]
    assert none["coverage_0"] >= 0.8
    assert push["coverage_0"] <= none["coverage_0"] - 0.5
    assert push["supported_0"] >= 0.5 and push["bias"] > 0
    assert any("push_aligned" in f for f in check_design(list(rows.values())))


def test_power_rises_with_the_planted_effect() -> None:
    kw = {"toys": 6, "n_boot": 99, "n_concepts": 12, "classes": ["none"]}
    small = {r["estimand"]: r for r in simulate(V2.identify, PRIMARY, sesoi=0.0, **kw)}
    large = {r["estimand"]: r for r in simulate(V2.identify, PRIMARY, sesoi=2.0, **kw)}
    assert large["primary"]["power"] >= small["primary"]["power"] + 0.5
    assert large["primary"]["mean_planted"] > small["primary"]["mean_planted"] + 1.0


def _row(cls: str, coverage: float | None, estimand: str = "primary") -> dict:
    return {"estimand": estimand, "class": cls, "coverage_0": coverage, "n_null": 50,
            "supported_0": 1 - (coverage or 0)}  # fmt: skip


def test_the_gate_flags_each_failing_class_and_passes_a_sound_table() -> None:
    assert check_design([_row("none", 0.95), _row("convex", 0.9)]) == []
    failures = check_design([_row("none", 0.95), _row("push", 0.62), _row("dose", None)])
    assert len(failures) == 2
    assert failures[0].startswith("push:") and "62%" in failures[0]
    # a primary that does not hold the dose fixed is held to its own truth
    mediated = {**_row("dose", 0.93), "coverage": 0.93, "truth": 0.5, "coverage_0": 0.1}
    assert check_design([mediated]) == []
    assert "not evaluable" in failures[1]
    assert check_design([_row("none", 0.95, "flexible")]) == ["the table has no 'primary' rows"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    cls=st.sampled_from(sorted(sim.CLASSES)),
    estimand=st.sampled_from(["primary", "flexible", "linear_cos", "matched_pairs"]),
)
def test_family_weights_are_shares(seed: int, cls: str, estimand: str) -> None:
    toy = sim.toy_directions(V2.identify, sim.CLASSES[cls], seeded_rng(seed, "w"), 0.0, 3)
    weights = family_weights(toy, estimand, ["log_kl"])
    assert weights and all(w >= 0 for w in weights.values())
    assert sum(weights.values()) == pytest.approx(1.0)
    if estimand in ("primary", "flexible"):  # v* is alone in its (concept, family) cell
        assert weights.get("reference", 0.0) == pytest.approx(0.0, abs=1e-9)


def test_the_weights_reproduce_the_pooled_slope() -> None:
    """The primary's slope is the weight-averaged family ratios Σ_m x̃·y / Σ_m x̃² over its
    rows (the nulls left out): the weights are what the estimator does, not a separate
    story."""
    from experiments.identify.estimation.cells import null_rows
    from experiments.identify.estimation.estimator import _groups, design, log_kl
    from experiments.identify.estimation.variance import demean as _demean
    from experiments.identify.simulation.design import _residual

    whole = sim.toy_directions(V2.identify, sim.CLASSES["none"], seeded_rng(3, "r"), 0.5, 6)
    assert (whole["direction"] == "rotation:isotropic:90").any()  # on the grid, not pooled
    assert family_weights(whole, "primary", ["log_kl"]) == family_weights(
        whole[~null_rows(whole)], "primary", ["log_kl"]
    )
    toy = whole[~null_rows(whole)].reset_index(drop=True)
    toy = toy.assign(log_kl=log_kl(toy["kl"]))
    x, _, _ = design(toy, ["auroc"], covariates=["log_kl"])
    xt = _residual(x)
    y = _demean(toy[["effect"]].to_numpy(np.float64), _groups(toy, "manipulation"))[:, 0]
    fam = toy["manipulation"].to_numpy()
    weights = family_weights(toy, "primary", ["log_kl"])
    ratios = {m: (xt[fam == m] @ y[fam == m]) / (xt[fam == m] @ xt[fam == m]) for m in weights
              if weights[m] > 0}  # fmt: skip
    pooled = sum(weights[m] * r for m, r in ratios.items())
    fit = estimands(whole, PRIMARY, 19, 0)["primary"]
    assert pooled == pytest.approx(fit["estimate"], rel=1e-6)


def test_the_primary_leaves_the_null_out_and_names_its_rows() -> None:
    """``rotation:isotropic:90`` is on the grid (its family's curve ends there) but is
    orthogonal to v*, a null: the primary is the estimator on the rows without it, and
    says which manipulations entered and which directions it left out."""
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.estimator import flexible_slope, log_kl
    from experiments.identify.estimation.primary import primary_result

    toy = sim.toy_directions(V2.identify, sim.CLASSES["none"], seeded_rng(4, "p"), 0.0, 4)
    got = primary_result(StudyTables(toy), PRIMARY, n_boot=19, seed=0)
    assert got.left_out == ["rotation:isotropic:90"]
    assert got.manipulations == sorted(set(toy["manipulation"]))  # each family still in
    rows = toy[toy["direction"] != "rotation:isotropic:90"]
    want = flexible_slope(
        rows.assign(log_kl=log_kl(rows["kl"])), "effect", "auroc", covariates=["log_kl"],
        n_boot=19, seed=0,
    )  # fmt: skip
    assert got.slope.estimate == pytest.approx(want.estimate, rel=1e-12)
    whole = flexible_slope(
        toy.assign(log_kl=log_kl(toy["kl"])), "effect", "auroc", covariates=["log_kl"],
        n_boot=19, seed=0,
    )  # fmt: skip
    assert got.slope.estimate != pytest.approx(whole.estimate, rel=1e-6)


def test_the_command_prints_the_table_writes_it_and_names_the_gates_failures(
    tmp_path, monkeypatch
) -> None:
    """``identify simulate`` end to end, with the bank of toys replaced by a fixed table
    (the toys themselves are tested above; the old ``--simulate`` form in
    tests/experiments/cli/test_identify_commands.py)."""
    import json

    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.identify.simulation import design

    rows = [
        {**_row("none", 0.96), "bias": 0.0, "power": 0.2, "width": 1.0, "weights": {"isocos": 1}},
        {**_row("push", 0.6), "bias": 0.3, "power": 0.5, "width": 1.0, "weights": {"noise": 1}},
    ]
    monkeypatch.setattr(design, "simulate", lambda *a, **k: rows)
    args = ["identify", "simulate", "--config", "configs/identify-v2.yaml", "--toys", "3",
            "--set", f"identify.results_dir={tmp_path}"]  # fmt: skip
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "push: the primary's interval covers its truth (+0.00) in 60%" in out.output
    (written,) = tmp_path.glob("simulate-*.json")
    result = json.loads(written.read_text())
    assert result["study_hash"] == "f00e12abecb5" and result["toys_per_class_and_arm"] == 3
    assert result["failures"] and (tmp_path / written.name.replace(".json", ".csv")).exists()
    out = CliRunner().invoke(app, [*args, "--json"])
    assert json.loads(out.output)["table"] == rows


# ---------------------------------------------------------------- v3: random nuisances


def test_a_v3_toy_draws_nuisances_per_concept_in_balanced_bands() -> None:
    toy = sim.toy_directions(V3_DEV.identify, sim.CLASSES["none"], seeded_rng(0, "v3"), 0.0, 4)
    iso = toy[(toy["manipulation"] == "isocos") & (toy["level"] == 45)]
    assert iso.groupby("concept")["seed"].nunique().eq(12).all()
    assert iso.groupby(["concept", "nuisance_band"]).size().eq(3).all()  # 4 bands x 3
    # inside a (concept, band) cell the draws still differ in AUROC: the coin's work
    assert iso.groupby(["concept", "nuisance_band"])["auroc_true"].std().mean() > 0.005


def test_v3s_primary_is_the_practitioners_estimand() -> None:
    primary = primary_of(V3)
    assert primary.estimator == "practitioner"
    assert primary.estimand == "practitioner_equal_norm"
    assert primary.control == "none"
    assert primary.sesoi == 0.25 and primary.equivalence_margin == 0.25


def test_low_noise_pushes_that_break_v2s_primary_leave_v3s_covering_0(low_noise) -> None:
    """The design claim of v3: a push shared by a nuisance type and aligned with its
    AUROC is absorbed by the band strata, because within a band the AUROC is set by the
    random signs."""
    kw = {"toys": 10, "n_boot": 99, "n_concepts": 10, "classes": ["push_aligned"]}
    rows = {r["estimand"]: r for r in simulate(V3_DEV.identify, EQUAL_GEOMETRY, **kw)}
    assert rows["primary"]["coverage"] >= 0.8
    assert abs(rows["primary"]["bias"]) < 0.3


def test_a_v3_toy_measures_its_geometry_again_on_the_second_half() -> None:
    toy = sim.toy_directions(V3_DEV.identify, sim.CLASSES["cos_error"], seeded_rng(0, "h"), 0.0, 4)
    cells = (toy["manipulation"] == "isocos") & (toy["level"] < 90)
    assert toy.loc[cells, "auroc_error_within"].notna().all()
    assert toy.loc[~cells, "auroc_error_within"].isna().all()
    # cos_half = true cos + an error as large as the reference's own (sd 0.05 each)
    error = toy["cos_half"] - toy["true_cos"]
    assert 0.03 < error.std() < 0.07
    assert 0.03 < (toy["true_cos"] - toy["cos_ref"]).std() < 0.07


def test_the_noisy_reference_biases_the_bare_slope_and_the_correction_removes_it(
    low_noise,
) -> None:
    """The class that kept v3 from binding: with no AUROC effect, the reference's error
    moves a direction's true angle, its AUROC and its effect together, so the bare
    within-cell slope reads a positive effect; the errors-in-variables slope (cos to the
    other half's diffmean, AUROC's error variance from split halves) does not."""
    kw = {"toys": 8, "n_boot": 99, "n_concepts": 40, "classes": ["cos_error"]}
    rows = {r["estimand"]: r for r in simulate(V3_DEV.identify, EQUAL_GEOMETRY, **kw)}
    assert rows["equal_geometry_uncorrected"]["bias"] > 0.2
    assert rows["equal_geometry_uncorrected"]["coverage"] <= 0.5
    assert abs(rows["equal_geometry"]["bias"]) < 0.15
    assert rows["equal_geometry"]["coverage"] >= 0.75
    assert rows["primary"]["bias"] == rows["equal_geometry"]["bias"]


def test_a_mediated_dose_is_the_truth_of_an_estimand_that_does_not_hold_it() -> None:
    from experiments.identify.simulation.design import truth

    assert truth("equal_geometry", "dose_rel_0.74", EQUAL_GEOMETRY) == pytest.approx(0.5)
    assert truth("primary", "dose_rel_0.74", PRIMARY) == 0.0  # v2 holds log KL
    assert truth("equal_geometry", "none", EQUAL_GEOMETRY) == 0.0


def _prereg(tmp_path, **primary):
    from experiments.identify.heldout.prereg import Preregistration
    from experiments.record import PrimarySpec

    spec = PrimarySpec(predictor="auroc", outcome="likelihood", **primary)
    return Preregistration(tmp_path / "prereg.md", "0" * 64, spec, None)


def test_a_v3_primary_without_a_passing_design_table_is_refused(tmp_path) -> None:
    import json

    from experiments.identify.heldout.prereg import (
        PreregistrationError,
        check_design_table,
        study_hash,
    )

    for estimator in ("equal_geometry", "practitioner"):
        with pytest.raises(PreregistrationError, match="names no design_table"):
            check_design_table(_prereg(tmp_path, estimator=estimator), V3)
    table = tmp_path / "design.json"
    table.write_text(json.dumps({"study_hash": "other", "failures": []}))
    with pytest.raises(PreregistrationError, match="not this one"):
        check_design_table(_prereg(tmp_path, design_table=str(table)), V3)
    table.write_text(json.dumps({"study_hash": study_hash(V3), "failures": ["push: 60%"]}))
    with pytest.raises(PreregistrationError, match="gate refused"):
        check_design_table(_prereg(tmp_path, design_table=str(table)), V3)
    table.write_text(json.dumps({"study_hash": study_hash(V3), "failures": []}))
    check_design_table(_prereg(tmp_path, design_table=str(table), estimator="equal_geometry"), V3)
    check_design_table(_prereg(tmp_path, estimator="flexible_cos"), V2)  # v2: no table needed


@settings(max_examples=200, deadline=None)
@given(
    low=st.floats(-2, 2),
    width=st.floats(0, 2),
    margin=st.one_of(st.none(), st.floats(0.01, 1)),
    hypothesis=st.sampled_from(["positive", "negative"]),
)
def test_the_primary_reading_follows_the_interval(low, width, margin, hypothesis) -> None:
    from experiments.identify.estimation.primary import read_verdict

    high = low + width
    verdict = read_verdict(Interval(low + width / 2, low, high), hypothesis, margin)
    if margin is not None and -margin < low and high < margin:
        assert verdict == "no_practical_effect"
    elif low <= 0 <= high:
        assert verdict == "inconclusive"
    else:
        above = low > 0
        assert verdict == ("supported" if above == (hypothesis == "positive") else "contradicted")
    assert read_verdict(Interval(), hypothesis) == "not_evaluable"


def test_the_power_curve_rises_with_concepts_and_narrows_the_interval(low_noise) -> None:
    from experiments.identify.simulation.design import power_curve

    primary = EQUAL_GEOMETRY.model_copy(update={"sesoi": 1.0})
    small, large = power_curve(V3_DEV.identify, primary, [4, 24], toys=6, n_boot=99)
    assert (small["n_concepts"], large["n_concepts"]) == (4, 24)
    assert large["width"] < small["width"]
    assert large["power"] >= small["power"]
    assert 0.0 <= large["no_practical_0"] <= 1.0


def test_the_equal_geometry_primary_draws_all_its_weight_from_the_equal_geometry_cells() -> None:
    rows = simulate(V3_DEV.identify, EQUAL_GEOMETRY, toys=2, n_boot=19, n_concepts=4,
                    classes=["none"])  # fmt: skip
    (primary,) = [r for r in rows if r["estimand"] == "primary"]
    assert primary["weights"] == {"isocos": 1.0}


def test_the_practitioner_primary_weighs_only_the_directions_people_build() -> None:
    from experiments.identify.estimation.variance import PRACTITIONER

    rows = simulate(V3.identify, primary_of(V3), toys=2, n_boot=19, n_concepts=4,
                    classes=["none"], primary_only=True)  # fmt: skip
    (primary,) = rows
    assert set(primary["weights"]) <= set(PRACTITIONER)
    assert {"shrinkage", "logistic", "size"} <= set(primary["weights"])
    assert sum(primary["weights"].values()) == pytest.approx(1.0, abs=1e-3)


def test_the_practitioners_truth_is_0_when_no_direction_steers_differently() -> None:
    """In the flat class every direction of a concept steers alike: what detection
    predicts there is exactly 0, and with a slope planted it is that slope, attenuated
    only by AUROC's measurement error."""
    from experiments.identify.estimation.variance import practitioner_truth

    flat = sim.CLASSES["flat"]
    toy = sim.toy_directions(V3.identify, flat, seeded_rng(0, "flat"), 0.0, 200)
    assert practitioner_truth(toy) == pytest.approx(0.0, abs=1e-12)
    planted = sim.toy_directions(V3.identify, flat, seeded_rng(0, "flat"), 0.5, 200)
    assert 0.4 < practitioner_truth(planted) <= 0.5
    linear = sim.toy_directions(V3.identify, sim.CLASSES["none"], seeded_rng(0, "n"), 0.0, 200)
    assert abs(practitioner_truth(linear)) > 0.1  # geometry is part of what it predicts


def test_the_power_of_a_predictive_primary_is_read_where_its_truth_is_0() -> None:
    from experiments.identify.simulation.design import population_of, power_class

    assert power_class(primary_of(V3)) == "flat"
    assert power_class(EQUAL_GEOMETRY) == "none"
    assert population_of(primary_of(V3)) == "practitioner"
    assert population_of(EQUAL_GEOMETRY) == "equal_geometry"


def test_the_practitioner_primary_covers_its_truth_in_every_kind_of_toy(low_noise) -> None:
    """The gate for a predictive primary: its truth in a toy is what detection predicts
    there (not 0 where geometry steers), and its interval covers that truth; in the flat
    class it reads 'no practical effect'."""
    kw = {"toys": 6, "n_boot": 99, "n_concepts": 40, "primary_only": True,
          "classes": ["none", "concave", "flat", "push_aligned"]}  # fmt: skip
    rows = {r["class"]: r for r in simulate(V3.identify, primary_of(V3), **kw)}
    assert rows["flat"]["truth"] == pytest.approx(0.0, abs=1e-9)
    assert abs(rows["none"]["truth"]) > 0.1
    for row in rows.values():
        assert row["coverage"] >= 4 / 6, row
        assert abs(row["bias"]) < 0.1, row
    assert rows["flat"]["no_practical_0"] >= 4 / 6
    assert rows["flat"]["power"] >= 4 / 6  # the planted 0.25 found at low noise


def test_a_cos_line_per_concept_removes_steerability_tied_to_separability(low_noise) -> None:
    """v2's heterogeneity class: concepts that separate better also steer faster with cos,
    and the equal-norm slope lends that to AUROC; each (concept, manipulation)'s own line
    in cos (the robustness row) takes it back."""
    kw = {"toys": 6, "n_boot": 99, "n_concepts": 25, "classes": ["steer_sep_r0.7"]}
    rows = {r["estimand"]: r for r in simulate(V2.identify, PRIMARY, **kw)}
    assert rows["flexible"]["bias"] > 0.05 and rows["flexible"]["coverage"] <= 0.5
    assert abs(rows["equal_norm_cos_per_concept"]["bias"]) < 0.02
    assert rows["equal_norm_cos_per_concept"]["coverage"] >= 5 / 6
