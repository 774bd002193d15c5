"""The variance components the design simulation takes from data (identify v3).

A run's ``directions.csv`` holds, per concept, directions that differ in AUROC within
cells of fixed geometry (the equal-geometry cells: concept × angle × band, or for any
other estimand the rows it compares). Fitting each concept's own slope of the outcome on
AUROC inside its cells, and pooling the slopes as a random-effects meta-analysis
(DerSimonian–Laird, ``statsmodels.stats.meta_analysis.combine_effects``), splits the
error of the pooled slope into

* **within-concept noise**: the residual sd of the outcome inside a cell once AUROC's
  slope is taken out (what more directions per concept average away), and
* **between-concept slope spread** τ: how much concepts' own AUROC slopes differ (what
  only more concepts average away),

beside the AUROC spread inside a cell (what the nuisances' draws give the estimator to
work with). ``steer-eval identify simulate --components RUN`` reads these from a run
folder (``compare.read_directions``) into the toys (:func:`toy_overrides`) in place of
the assumed ones, so power and the number of concepts a confirmatory run needs follow
from measured noise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments.record.pooled import Components

if TYPE_CHECKING:
    from pathlib import Path

MIN_ROWS = 3  # a concept's slope needs this many rows with AUROC varying inside cells


def demean(block: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each column of ``block`` less its mean within its group (the cells, the concepts)."""
    _, index = np.unique(groups, return_inverse=True)
    sums = np.zeros((index.max() + 1, block.shape[1]))
    np.add.at(sums, index, block)
    out: np.ndarray = block - (sums / np.bincount(index)[:, None])[index]
    return out


def cell_keys(frame: pd.DataFrame) -> pd.Series:
    """The equal-geometry cell of each iso-cos row: concept × angle (× band if drawn).
    A grid without iso-cos rows (v3's confirmatory one) has no cells."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=object)
    keys = frame["concept"].astype(str) + "|" + frame["level"].map("{:g}".format)
    if "nuisance_band" in frame and frame["nuisance_band"].notna().all():
        keys = keys + "|" + frame["nuisance_band"].astype(int).astype(str)
    return keys


def equal_geometry_rows(
    frame: pd.DataFrame, y: str = "effect", predictor: str = "auroc",
    manipulation: str = "isocos",
) -> pd.DataFrame:  # fmt: skip
    """The rows the equal-geometry estimand compares (``estimator.equal_geometry``, the
    reliabilities, the components), with their cell."""
    iso = frame[(frame["manipulation"] == manipulation) & (frame["level"] < 90)]
    iso = iso.dropna(subset=["concept", "level", y, predictor])
    return iso.assign(cell=cell_keys(iso))


# The directions practitioners build for a concept (issue 53's practitioner estimand): the
# diffmean v*, the logistic C path, the shrinkage (whitened) path and the diffmean from
# fewer training texts. Label noise (a degraded v*), the rotations and iso-cos nuisances
# (made to move geometry) and the nulls are not among them.
PRACTITIONER = ("reference", "logistic", "shrinkage", "size")
# The built directions fitted on the full training set: the practitioner's without the
# diffmeans from fewer texts, whose estimation noise carried v3's pooled slope (identify
# v4's co-primary P2).
FULL_DATA = ("reference", "logistic", "shrinkage")
# The families each practitioner estimator compares, by the estimator's name.
BUILT_FAMILIES: dict[str, tuple[str, ...]] = {
    "practitioner": PRACTITIONER,
    "practitioner_full_data": FULL_DATA,
}


def practitioner_rows(
    frame: pd.DataFrame,
    y: str = "effect",
    predictor: str = "auroc",
    families: tuple[str, ...] = PRACTITIONER,
) -> pd.DataFrame:
    """The rows the practitioner estimands compare (``families`` of built directions),
    each concept its own cell."""
    rows = frame[frame["manipulation"].isin(families)]
    rows = rows.dropna(subset=["concept", y, predictor])
    return rows.assign(cell=rows["concept"].astype(str))


WORDS = {"equal_geometry": "an equal-geometry", "practitioner": "a practitioner's"}
POPULATIONS = tuple(WORDS)  # the rows components() can measure


def practitioner_truth(frame: pd.DataFrame, families: tuple[str, ...] = PRACTITIONER) -> float:
    """The practitioner's estimand in one toy, without noise: the pooled within-concept
    slope of the effect's mean (``effect_mean``: the concepts' slopes at their mean) on
    AUROC as measured, over the practitioner's directions. AUROC's measurement error is
    part of the estimand (the question is about AUROC as a practitioner measures it)."""
    rows = practitioner_rows(frame, "effect_mean", families=families)
    groups = rows["cell"].to_numpy()
    x = demean(rows[["auroc"]].to_numpy(np.float64), groups)[:, 0]
    y = demean(rows[["effect_mean"]].to_numpy(np.float64), groups)[:, 0]
    return float(x @ y / (x @ x))


def auroc_within_sd(frame: pd.DataFrame) -> float:
    """AUROC's sd inside the equal-geometry cells (pooled over cells): what the draws give
    the estimator to work with."""
    rows = equal_geometry_rows(frame.assign(effect=0.0))
    x = rows["auroc"] - rows.groupby("cell")["auroc"].transform("mean")
    dof = len(rows) - rows["cell"].nunique()
    return float(np.sqrt((x**2).sum() / dof)) if dof > 0 else 0.0


def components(
    frame: pd.DataFrame, y: str = "effect", population: str = "equal_geometry"
) -> Components:
    """Per-concept slopes inside cells, pooled by random effects (the module docstring);
    ``population``: the equal-geometry cells, or the practitioner's directions (a concept
    one cell). Raises ValueError when fewer than 3 concepts have a slope."""
    from statsmodels.stats.meta_analysis import combine_effects

    if population not in POPULATIONS:
        raise ValueError(f"population {population!r} is not one of {sorted(POPULATIONS)}")
    rows = (
        practitioner_rows(frame, y)
        if population == "practitioner"
        else equal_geometry_rows(frame, y)
    )
    slopes, variances, residuals, spreads, counts = [], [], [], [], []
    for _, g in rows.groupby("concept", sort=True):
        x = g["auroc"] - g.groupby("cell")["auroc"].transform("mean")
        v = g[y] - g.groupby("cell")[y].transform("mean")
        dof = len(g) - g["cell"].nunique() - 1
        sxx = float((x**2).sum())
        if dof < 1 or len(g) < MIN_ROWS or sxx <= 0:
            continue
        b = float((x * v).sum() / sxx)
        resid = v - b * x
        s2 = float((resid**2).sum() / dof)
        slopes.append(b)
        variances.append(s2 / sxx)
        residuals.append(s2)
        spreads.append(float((x**2).sum() / max(len(g) - g["cell"].nunique(), 1)))
        counts.append(len(g))
    if len(slopes) < 3:
        raise ValueError(
            f"{len(slopes)} concepts have {WORDS[population]} slope (need 3): the run has "
            f"too few of its rows with AUROC varying inside cells"
        )
    fit = combine_effects(np.array(slopes), np.array(variances), method_re="dl")
    reliability = None
    if "auroc_error_within" in rows and rows["auroc_error_within"].notna().all():
        spread = rows["auroc"] - rows.groupby("cell")["auroc"].transform("mean")
        reliability = float(1 - rows["auroc_error_within"].sum() / (spread**2).sum())
    return Components(
        n_concepts=len(slopes),
        rows_per_concept=float(np.mean(counts)),
        pooled_slope=float(fit.mean_effect_re),
        pooled_se=float(fit.sd_eff_w_re),
        slope_sd=float(np.sqrt(max(fit.tau2, 0.0))),
        within_sd=float(np.sqrt(np.mean(residuals))),
        auroc_within_sd=float(np.sqrt(np.mean(spreads))),
        i2=float(fit.i2),
        auroc_reliability=reliability,
    )


def components_from_json(path: str | Path) -> Components:
    """The components a design or power JSON recorded (its ``measured`` block): a run's
    noise kept after the run folder is gone. Raises ValueError when it has none."""
    import json
    from pathlib import Path

    data = json.loads(Path(path).read_text(encoding="utf-8"))
    block = data.get("measured") if isinstance(data, dict) else None
    if not isinstance(block, dict):
        raise ValueError(f"{path} has no 'measured' block (write one with --components RUN)")
    try:
        return Components(**block)
    except TypeError as exc:
        raise ValueError(f"{path}: the 'measured' block does not match Components: {exc}") from None


def toy_overrides(measured: Components) -> dict[str, float]:
    """The toy's assumed components (``simulate.TOY``) replaced by the measured ones."""
    return {
        "effect_sd": measured.within_sd,
        "slope_sd": measured.slope_sd,
    }
