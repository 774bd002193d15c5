"""What carries the practitioner's slope: the primary taken apart by the family of built
directions, and AUROC beside the direction's geometry (exploratory, after the primary).

identify v3's primary pools four ways of building a direction (``variance.PRACTITIONER``:
v*, the logistic C path, the shrinkage path, the diffmean from fewer texts). A pooled
within-concept least-squares slope is Σ x·y / Σ x² over rows, x and y centred on their
concept, so each family's part of the numerator Σ x·y says which rows make the slope.
Refitting without each family, and within (concept, family), says whether the better
detector steers better along one builder's own path or only between builders. The
outcome's within-concept R² on AUROC beside its R² on the cosine to a diffmean from texts
apart from v*'s (:data:`GEOMETRY_COLUMNS`) says whether detection predicts beyond
geometry. Every refit is
read by the pre-registered rule for comparison only: none of them is confirmatory.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.identify.estimation.estimator import practitioner_slope
from experiments.identify.estimation.primary import read_verdict
from experiments.identify.estimation.variance import PRACTITIONER, demean, practitioner_rows
from experiments.identify.stages.directions import REFERENCE
from experiments.record.pooled import FamilyDecomposition, Geometry, Refit
from metrics.cluster import ClusterFit, wild_cluster_restricted
from metrics.intervals import Interval, bootstrap_statistic

# The diffmeans from one and two texts per class: the two noisiest built directions.
SMALLEST_SIZES = ("size:1x1x1", "size:2x2x2")
FAMILY_WORDS = {
    REFERENCE: "v* (the diffmean)",
    "logistic": "the logistic C path",
    "shrinkage": "the shrinkage (whitened) path",
    "size": "the diffmean from fewer texts",
}


# The geometry measures, best first: the cosine to the diffmean of the validation texts
# (v4: no builder trained on them and AUROC does not rank them), else to the other half's
# diffmean (v3: independent of v*'s texts only; the other builders trained on that half).
GEOMETRY_COLUMNS = ("cos_validation", "cos_half")


def _centred(frame: pd.DataFrame) -> pd.DataFrame:
    data = practitioner_rows(frame)
    centred = demean(data[["auroc", "effect"]].to_numpy(np.float64), data["concept"].to_numpy())
    return data.assign(x=centred[:, 0], y=centred[:, 1])


def numerator_shares(frame: pd.DataFrame, by: str) -> dict[str, float]:
    """Each group's (``by``: a column, ``manipulation`` or ``direction``) share of the
    within-concept slope's numerator Σ x·y; the shares sum to 1."""
    data = _centred(frame)
    xy = (data["x"] * data["y"]).groupby(data[by], sort=False).sum()
    return {str(k): float(v / xy.sum()) for k, v in xy.items()}


def between_family_share(frame: pd.DataFrame) -> float:
    """The share of AUROC's within-concept sum of squares that lies between the families
    of a concept's built directions (the rest lies within a family)."""
    data = _centred(frame)
    cell_mean = data.groupby(["concept", "manipulation"], sort=False)["x"].transform("mean")
    return float((cell_mean**2).sum() / (data["x"] ** 2).sum())


def _family_means(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    means = practitioner_rows(frame).groupby("manipulation", sort=False)[["auroc", "effect"]]
    return {
        str(k): {str(c): float(v) for c, v in row.items()} for k, row in means.mean().iterrows()
    }


def _parts(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame, bool]]:
    """(name, rows in words, rows, within family) of every refit."""
    m = frame["manipulation"]
    smallest = frame[~frame["direction"].isin(SMALLEST_SIZES)]
    every = "every built direction"
    parts = [
        ("all (the primary)", every, frame, False),
        ("within (concept, family)", f"{every}, compared within its family", frame, True),
        (f"without {' and '.join(SMALLEST_SIZES)}", f"{every} but those two", smallest, False),
    ]
    for f in PRACTITIONER:
        parts.append((f"without {f}", f"{every} but {FAMILY_WORDS[f]}", frame[m != f], False))
    for f in PRACTITIONER[1:]:  # v* is one direction per concept: no slope alone
        parts.append((f"within {f} alone", f"{FAMILY_WORDS[f]} alone", frame[m == f], False))
    return parts


def refits(
    frame: pd.DataFrame, n_boot: int, seed: int, hypothesis: str, margin: float | None
) -> list[Refit]:
    """The primary's estimator on every part of :func:`_parts`, each read by the rule."""
    out = []
    for name, words, rows, within in _parts(frame):
        fit = practitioner_slope(rows, n_boot=n_boot, seed=seed, within_family=within)
        out.append(Refit(name, words, fit, read_verdict(fit, hypothesis, margin)))
    return out


def _r2(sums: list[np.ndarray], columns: list[int]) -> float | None:
    """Pooled within-concept R² of the last column on ``columns`` from per-concept
    cross-product matrices (so a concept bootstrap re-sums them, not the rows)."""
    s = np.sum(sums, axis=0)
    xx, xy, yy = s[np.ix_(columns, columns)], s[columns, -1], s[-1, -1]
    if yy <= 0 or np.linalg.matrix_rank(xx) < len(columns):
        return None
    return float(xy @ np.linalg.solve(xx, xy) / yy)


def geometry(frame: pd.DataFrame, n_boot: int, seed: int) -> Geometry | None:
    """AUROC beside a direction's geometry measured on texts apart from v*'s (see the
    module's docstring and :data:`GEOMETRY_COLUMNS`); None where the table has neither."""
    present = [c for c in GEOMETRY_COLUMNS if c in frame and frame[c].notna().any()]
    if not present:
        return None
    column = present[0]
    data = practitioner_rows(frame).dropna(subset=[column])
    cols = ["auroc", column, "effect"]
    concepts = data["concept"].to_numpy()
    centred = demean(data[cols].to_numpy(np.float64), concepts)
    sums = [centred[concepts == c].T @ centred[concepts == c] for c in pd.unique(concepts)]

    def r2(columns: list[int]) -> Interval:
        method = "concept bootstrap, percentile"
        return bootstrap_statistic(
            sums, lambda u: _r2(u, columns), n_boot=n_boot, seed=seed, method=method
        )

    def slope(x: np.ndarray) -> ClusterFit:
        return wild_cluster_restricted(x, centred[:, 2], concepts, 0, n_boot=n_boot, seed=seed)

    return Geometry(
        column, r2([0]), r2([1]), r2([0, 1]), slope(centred[:, :2]), slope(centred[:, 1:2])
    )


def decompose(
    frame: pd.DataFrame, n_boot: int, seed: int, hypothesis: str, margin: float | None
) -> FamilyDecomposition:
    """The primary taken apart (the module's docstring), on the pooled directions table."""
    return FamilyDecomposition(
        numerator_share_by_family=numerator_shares(frame, "manipulation"),
        numerator_share_by_direction=numerator_shares(frame, "direction"),
        auroc_between_family_share=between_family_share(frame),
        family_means=_family_means(frame),
        refits=refits(frame, n_boot, seed, hypothesis, margin),
        geometry=geometry(frame, n_boot, seed),
    )


def markdown(block: FamilyDecomposition) -> list[str]:
    """The decomposition's lines for ``exploratory.md``."""
    from experiments.answer import estimate_of

    lines = [
        "",
        "## What carries the slope (exploratory)",
        "",
        "Each family's share of the within-concept slope's numerator Σ x·y: "
        + ", ".join(f"{k} {v:.0%}" for k, v in block.numerator_share_by_family.items())
        + f"; {block.auroc_between_family_share:.0%} of AUROC's within-concept variation "
        "lies between families.",
        "",
        "| rows | slope (95%) | read by the pre-registered rule |",
        "|---|---|---|",
    ]
    for r in block.refits:
        lines.append(f"| {r.name} | {estimate_of(r.fit)} | {r.verdict.replace('_', ' ')} |")
    geo = block.geometry
    if geo is not None:
        lines += [
            "",
            "Within concept, the effect's R² on AUROC "
            f"{estimate_of(geo.r2_auroc)}, on the cosine `{geo.column}` "
            f"{estimate_of(geo.r2_cos)}, on both {estimate_of(geo.r2_both)}; AUROC's slope "
            f"beside that cosine {estimate_of(geo.slope_auroc_beside_cos)}.",
        ]
    return lines
