"""The identified estimator (identify v2) on toy studies with a known answer.

The v1 primary (concept fixed effects, one straight line in cos) reads a toy in which
AUROC does nothing as "supported" or "contradicted" depending on the effect's curvature
in cos; the v2 estimator's interval must cover 0 in at least 90% of 200 seeded toys for
every shape, and recover a planted AUROC effect."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from experiments.identify.estimation import stats
from experiments.identify.estimation.estimator import (
    flexible_slope,
    identified_analysis,
    matched_pairs,
    per_family_slopes,
    probit_auroc,
    spline_basis,
    with_probit,
)
from experiments.identify.simulation.simulate import SHAPES, toy_study
from experiments.record import PrimarySpec

N_TOYS = 200


@pytest.fixture(autouse=True)
def one_blas_thread():
    """Small matrices: BLAS threads only spin on a busy 2-core machine."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def _v1(frame):
    return stats.fe_coefficients(frame, "effect", ["auroc", "cos_ref"], n_boot=500, seed=0)["auroc"]


@pytest.mark.parametrize(("shape", "sign"), [("concave", 1), ("convex", -1), ("nuisance", -1)])
def test_the_v1_estimator_reads_curvature_as_detection(shape: str, sign: int) -> None:
    """Kept on record: why v2 exists (issue 36's toy, reproduced)."""
    fit = _v1(toy_study(0, shape))
    assert sign * fit.low > 0  # "supported" / "contradicted" with no AUROC effect at all


@pytest.mark.parametrize("shape", SHAPES)
def test_v2_covers_zero_when_auroc_does_nothing(shape: str) -> None:
    covered = []
    for seed in range(N_TOYS):
        fit = flexible_slope(
            toy_study(10_000 + seed, shape), "effect", "auroc", n_boot=199, seed=seed
        )
        covered.append(fit.low <= 0 <= fit.high)
    assert np.mean(covered) >= 0.90, f"{shape}: coverage {np.mean(covered):.3f}"


def test_v2_recovers_a_planted_effect() -> None:
    """Without measurement error the interval covers the planted slope; with it, the
    estimate is attenuated by the AUROC's reliability, and still excludes 0."""
    covered = []
    for seed in range(N_TOYS):
        toy = toy_study(20_000 + seed, "concave", planted=1.0, measurement_sd=0.0)
        fit = flexible_slope(toy, "effect", "auroc", n_boot=199, seed=seed)
        covered.append(fit.low <= 1.0 <= fit.high)
    assert np.mean(covered) >= 0.90
    noisy = [
        flexible_slope(
            toy_study(30_000 + s, "convex", planted=1.0), "effect", "auroc", n_boot=199, seed=s
        )
        for s in range(20)
    ]
    reliability = 0.04**2 / (0.04**2 + 0.025**2)
    assert np.mean([f.estimate for f in noisy]) == pytest.approx(reliability, abs=0.12)
    assert all(f.low > 0 for f in noisy)


def test_a_family_whose_auroc_is_one_function_of_cos_carries_no_information() -> None:
    """When AUROC is the same function of the angle for every concept (no direction-level
    spread, no measurement noise), the family's spline absorbs it: its own slope is not
    identified, instead of turning curvature into a slope. Label noise moves AUROC with
    ρ, not with cos, and stays identified."""
    toy = toy_study(1, "linear", auroc_sd=0.0, measurement_sd=0.0)
    out = per_family_slopes(toy[toy["manipulation"] != "reference"], "effect", "auroc", n_boot=99)
    assert {"rotation:isotropic", "rotation:pc", "rotation:other"} <= set(out.not_identified)
    assert out.slopes["noise"].estimate is not None
    spread = per_family_slopes(toy_study(1, "linear"), "effect", "auroc", n_boot=99)
    assert spread.slopes["rotation:pc"].estimate is not None
    assert spread.evaluable and spread.df_denominator == 24


def test_matched_pairs_compare_equal_geometry_only() -> None:
    toy = with_probit(toy_study(2, "linear"))
    out = matched_pairs(toy, "effect", "auroc", tolerance=0.02, n_boot=199)
    assert out.n_pairs > 0 and out.evaluable
    # every pair is within the tolerance and across families: none at tolerance 0 here
    assert matched_pairs(toy, "effect", "auroc", tolerance=0.0, n_boot=99).n_pairs > 0
    assert out.fit is not None and out.fit.n_clusters == 25


def test_probit_and_spline_helpers() -> None:
    assert probit_auroc(np.array([0.5]))[0] == pytest.approx(0.0)
    assert np.isfinite(probit_auroc(np.array([1.0, 0.0]))).all()
    basis = spline_basis(np.linspace(0, 1, 30), df=4)
    assert basis.shape == (30, 5)
    np.testing.assert_allclose(basis.sum(axis=1), 1.0)  # a partition of unity


def test_identified_analysis_reports_every_block() -> None:
    out = identified_analysis(toy_study(3, "convex"), n_boot=99)
    assert set(out.flexible) == {"auroc", "probit_auroc"}
    assert out.flexible["auroc"].n_clusters == 25
    assert (out.linear_cos["auroc"].high or 0) < 0  # v1's model, same inference: still biased
    assert out.heterogeneity_given_cos.F is not None


def test_the_dose_as_a_covariate_takes_what_the_dose_explains() -> None:
    """A toy where detection does nothing but directions that detect better also move the
    next token more (a larger dose), and the dose raises the effect: AUROC alone reads a
    slope; beside log KL it does not."""
    toy = toy_study(4, "linear")
    rng = np.random.default_rng(4)
    log_kl = 4.0 * (toy["auroc_true"] - toy["auroc_true"].mean()) + 0.05 * rng.standard_normal(
        len(toy)
    )
    toy = toy.assign(kl=np.exp(log_kl), effect=toy["effect"] + 0.3 * log_kl)
    out = identified_analysis(toy, n_boot=499)
    assert (out.flexible["auroc"].low or 0) > 0
    dosed = out.given_dose["auroc"].ends()
    assert dosed is not None and dosed[1] <= 0 <= dosed[2]


def test_before_after_reanalyses_a_directions_table(tmp_path) -> None:
    """A run's directions.csv re-analysed: v1 reads the concave toy as a positive slope,
    v2 does not; the command prints the table and refuses a folder without one."""
    from typer.testing import CliRunner

    from experiments.cli import app
    from experiments.identify.estimation.compare import before_after, markdown

    toy = toy_study(5, "concave")
    toy["direction"] = [
        "reference" if m == "reference" else f"{m}:{i}" for i, m in enumerate(toy["manipulation"])
    ]
    result = before_after(toy, n_boot=199)
    pooled = result.rows[-1]
    assert pooled.manipulation == "pooled" and (pooled.v1.low or 0) > 0
    assert (pooled.v2.low or 0) <= 0 <= (pooled.v2.high or 0)
    assert "| pooled |" in markdown(result)
    nulls = toy[toy["manipulation"] == "reference"].assign(manipulation="null", direction="null:0")
    pd.concat([toy, nulls]).to_csv(tmp_path / "directions.csv", index=False)
    from experiments.identify.estimation.compare import read_directions

    read = read_directions(tmp_path)
    assert (read["manipulation"] == "null").sum() == len(nulls)  # not read as missing
    assert len(before_after(read, n_boot=99).rows) == len(result.rows)
    out = CliRunner().invoke(app, ["identify", "--compare", str(tmp_path / "nothing")])
    assert out.exit_code == 2 and "no directions.csv" in out.output


def test_the_primary_with_the_dose_held_is_the_estimators_given_dose_fit():
    """primary_result(flexible_cos, control [cos_ref, log_kl]) is estimator.given_dose."""
    from experiments.identify.estimation.cells import StudyTables
    from experiments.identify.estimation.primary import primary_result

    frame = toy_study(3, "linear")
    frame["kl"] = np.random.default_rng(0).lognormal(-2, 1, len(frame))
    tables = StudyTables(directions=frame)
    spec = PrimarySpec(predictor="auroc", outcome="likelihood", estimator="flexible_cos",
                       hypothesis="positive", control=["cos_ref", "log_kl"])  # fmt: skip
    got = primary_result(tables, spec, n_boot=199, seed=0)
    want = identified_analysis(frame, n_boot=199, seed=0).given_dose["auroc"]
    assert got.slope.estimate == pytest.approx(want.estimate, rel=1e-12)
    assert got.slope.low == pytest.approx(want.low, rel=1e-12)


def _cells(rng: np.random.Generator, n_concepts: int = 6, slope: float = 0.8) -> pd.DataFrame:
    """Equal-geometry rows: per concept two angles x two bands x three draws."""
    rows = []
    for c in range(n_concepts):
        for level in (30.0, 60.0):
            for band in (0, 1):
                for k in range(3):
                    auroc = 0.8 + 0.05 * rng.standard_normal()
                    rows.append({
                        "concept": f"c{c}", "manipulation": "isocos", "level": level,
                        "nuisance_band": band, "seed": 2 * k + band, "auroc": auroc,
                        "effect": slope * auroc + 0.01 * rng.standard_normal(),
                        "cos_half": np.cos(np.deg2rad(level)), "auroc_error_within": 0.0,
                    })  # fmt: skip
    return pd.DataFrame(rows)


def test_the_practitioner_slope_compares_the_directions_people_build_within_concept() -> None:
    """A planted within-concept slope is recovered whatever each concept's own level;
    rows that are not built directions (iso-cos, label noise, nulls) do not enter."""
    from experiments.identify.estimation.estimator import practitioner_slope

    rng = np.random.default_rng(0)
    rows = []
    for c in range(30):
        level = 3 * rng.standard_normal()
        for m in ("reference", "logistic", "logistic", "shrinkage", "shrinkage", "size"):
            auroc = 0.8 + 0.1 * rng.standard_normal()
            rows.append({"concept": f"c{c}", "manipulation": m, "auroc": auroc,
                         "effect": level + 0.6 * auroc + 0.02 * rng.standard_normal()})  # fmt: skip
        for m in ("isocos", "noise", "control"):
            rows.append({"concept": f"c{c}", "manipulation": m, "auroc": 0.5 + rng.random(),
                         "effect": 10 * rng.standard_normal()})  # fmt: skip
    fit = practitioner_slope(pd.DataFrame(rows), n_boot=199, seed=0)
    assert fit.n == 180 and fit.n_clusters == 30
    assert fit.low < 0.6 < fit.high and fit.estimate == pytest.approx(0.6, abs=0.05)
    assert "restricted" in fit.method
    empty = practitioner_slope(pd.DataFrame(rows).query("manipulation == 'isocos'"))
    assert not empty.evaluable


def test_within_family_the_practitioner_slope_leaves_the_contrast_between_families_out() -> None:
    """Whitened directions detect better but, here, steer less as a family: the pooled
    slope mixes that contrast in, the within-family one recovers the slope inside each
    family."""
    from experiments.identify.estimation.estimator import practitioner_slope

    rng = np.random.default_rng(1)
    rows = []
    for c in range(30):
        for m, shift, offset in (("logistic", 0.0, 0.0), ("shrinkage", 0.15, -0.5),
                                 ("size", -0.1, 0.0)):  # fmt: skip
            for _ in range(4):
                auroc = 0.8 + shift + 0.05 * rng.standard_normal()
                effect = offset + 0.6 * auroc + 0.01 * rng.standard_normal()
                rows.append(
                    {"concept": f"c{c}", "manipulation": m, "auroc": auroc, "effect": effect}
                )
    frame = pd.DataFrame(rows)
    within = practitioner_slope(frame, n_boot=199, within_family=True)
    pooled = practitioner_slope(frame, n_boot=199)
    assert within.estimate == pytest.approx(0.6, abs=0.03) and within.low < 0.6 < within.high
    assert pooled.estimate < 0.0  # the families' contrast dominates the pooled slope
    assert within.n_clusters == pooled.n_clusters == 30


def test_a_cos_line_per_concept_and_family_is_the_slope_with_one_cos_column_per_group() -> None:
    """equal_norm_cos_per_concept partials each (concept, manipulation)'s own cos line out
    (Frisch–Waugh–Lovell) instead of adding a column per group: the same slope as the
    explicit design."""
    from experiments.identify.estimation.estimator import design

    rng = np.random.default_rng(3)
    rows = []
    for c in range(5):
        steer = 1 + rng.standard_normal()
        for m in ("noise", "logistic", "shrinkage"):
            for _ in range(9):
                cos = rng.uniform(0.3, 1.0)
                auroc = 0.6 + 0.3 * cos + 0.05 * rng.standard_normal()
                rows.append({"concept": f"c{c}", "manipulation": m, "cos_ref": cos,
                             "auroc": auroc, "effect": steer * cos + 0.2 * auroc
                             + 0.05 * rng.standard_normal()})  # fmt: skip
    frame = pd.DataFrame(rows)
    fit = flexible_slope(frame, "effect", "auroc", n_boot=99, cos_per_group=True)
    x, _, _ = design(frame, ["auroc"])
    groups = (frame["concept"] + "|" + frame["manipulation"]).to_numpy()
    extra = np.column_stack(
        [np.where(groups == g, frame["cos_ref"], 0.0) for g in sorted(set(groups))]
    )
    from experiments.identify.estimation.variance import demean

    full = np.column_stack([x, demean(extra, groups)])
    y = demean(frame[["effect"]].to_numpy(), groups)[:, 0]
    coef, *_ = np.linalg.lstsq(full, y, rcond=None)
    assert fit.estimate == pytest.approx(coef[0], abs=1e-9)
    plain = flexible_slope(frame, "effect", "auroc", n_boot=99)
    assert abs(fit.estimate - 0.2) < abs(plain.estimate - 0.2) + 0.05


def test_without_measurement_error_the_corrected_slope_is_the_bare_one() -> None:
    from experiments.identify.estimation.corrected import CORRECTED, CorrectedFit
    from experiments.identify.estimation.estimator import equal_geometry

    frame = _cells(np.random.default_rng(0))
    fit = equal_geometry(frame, n_boot=199, seed=0)
    bare = equal_geometry(frame, n_boot=199, seed=0, corrected=False)
    assert isinstance(fit, CorrectedFit) and fit.method == CORRECTED
    assert fit.estimate == pytest.approx(bare.estimate, rel=1e-12)
    assert fit.uncorrected == pytest.approx(bare.estimate, rel=1e-12)
    assert fit.auroc_reliability == 1.0 and fit.cos_reliability is None  # cos_half constant
    assert fit.low < 0.8 < fit.high


def test_the_correction_undoes_attenuation_by_a_known_auroc_error() -> None:
    """AUROC measured with error of known variance: the bare slope shrinks by the
    reliability, the corrected one does not (many concepts, so the check is tight)."""
    from experiments.identify.estimation.estimator import equal_geometry
    from experiments.identify.estimation.variance import equal_geometry_rows

    rng = np.random.default_rng(1)
    frame = _cells(rng, n_concepts=400, slope=1.0)
    error = 0.05 * rng.standard_normal(len(frame))  # as large as the true spread
    frame["auroc"] = frame["auroc"] + error
    rows = equal_geometry_rows(frame)
    deviation = pd.Series(error, index=frame.index)  # the error itself: variance known
    within = deviation - deviation.groupby(rows["cell"]).transform("mean")
    frame["auroc_error_within"] = (0.05**2) * (1 - 1 / 3)  # E[(e − ē)²] in cells of 3
    fit = equal_geometry(frame, n_boot=199, seed=0)
    assert fit.uncorrected == pytest.approx(0.5, abs=0.08)  # reliability 1/2
    assert fit.estimate == pytest.approx(1.0, abs=0.15)
    assert fit.auroc_reliability == pytest.approx(0.5, abs=0.08)
    assert float((within**2).mean()) == pytest.approx(0.05**2 * 2 / 3, rel=0.15)


def test_an_auroc_too_noisy_to_correct_is_refused_with_its_reliability() -> None:
    from experiments.identify.estimation.estimator import equal_geometry

    frame = _cells(np.random.default_rng(2)).assign(auroc_error_within=1.0)
    fit = equal_geometry(frame, n_boot=99, seed=0)
    assert not fit.evaluable
    assert "reliability inside cells" in fit.reason


def test_beyond_geometry_is_the_reliable_auroc_spread_the_true_angle_does_not_explain() -> None:
    """AUROC that is only the true angle leaves ~0 beyond geometry (the slope has nothing
    to use); AUROC independent of the angle leaves all of its reliable spread."""
    from experiments.identify.estimation.corrected import _cell_moments, beyond_geometry
    from experiments.identify.estimation.variance import equal_geometry_rows

    rng = np.random.default_rng(3)
    frame = _cells(rng, n_concepts=300)
    true_angle = 0.04 * rng.standard_normal(len(frame))
    frame["cos_half"] = true_angle + 0.04 * rng.standard_normal(len(frame))  # reliability 1/2
    geometric = frame.assign(auroc=0.8 + true_angle)
    independent = frame.assign(auroc=0.8 + 0.04 * rng.standard_normal(len(frame)))
    for data, expected in ((geometric, 0.0), (independent, 1.0)):
        moments, _ = _cell_moments(equal_geometry_rows(data), "effect", "auroc")
        assert beyond_geometry(moments.sum(axis=0)) == pytest.approx(expected, abs=0.1)
