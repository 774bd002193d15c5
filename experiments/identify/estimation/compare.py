"""v1 against v2 on one run's directions: the before/after table of issue 36.

Reads a finished (or older) identify run's ``directions.csv``, so runs made before the
v2 estimator existed are re-analysed without re-running anything: per manipulation and
pooled, v1's AUROC slope beside a straight line in cos (concept fixed effects, concept
bootstrap: what the v1 pre-registration scored) beside v2's flexible slope
(``estimator.py``: (concept, manipulation) fixed effects, a spline in cos per
manipulation, wild cluster bootstrap-t).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pydantic import BaseModel

from experiments.answer import estimate_of
from experiments.identify.estimation import stats
from experiments.identify.estimation.estimator import flexible_slope, identified_analysis
from experiments.identify.stages.directions import REFERENCE
from experiments.identify.stages.manipulations import family, is_control
from experiments.record.identified import IdentifiedResult
from experiments.rundir import RunDir
from metrics.cluster import ClusterFit
from metrics.intervals import Interval


def read_directions(run: str | Path) -> pd.DataFrame:
    """A run folder's (or a directions.csv's) directions table."""
    path = Path(run)
    if path.is_dir():
        path = path / RunDir.DIRECTIONS
    if not path.exists():
        raise FileNotFoundError(
            f"no {RunDir.DIRECTIONS} at {path}: give an identify run folder "
            "(results/identify/<run id>) or its directions.csv"
        )
    # "null" is a manipulation here, not a missing value: only empty cells are missing
    return pd.read_csv(path, keep_default_na=False, na_values=[""])


def _curve(frame: pd.DataFrame, m: str) -> pd.DataFrame:
    """The manipulation's rows, with v* on the curve when the manipulation passes through it
    (v1's ``StudyTables.curve``; the level does not enter either slope)."""
    rows = frame[frame["manipulation"] == m]
    found = family(m)
    if found is not None and found.reference is not None:
        rows = pd.concat([frame[frame["direction"] == REFERENCE].assign(manipulation=m), rows])
    return rows.reset_index(drop=True)


class BeforeAfterRow(BaseModel):
    """One manipulation (or ``pooled``): v1's AUROC slope beside v2's."""

    manipulation: str
    v1: Interval  # beside a straight line in cos, concept bootstrap
    v2: ClusterFit  # beside a spline in cos per manipulation, wild cluster bootstrap-t


class BeforeAfter(BaseModel):
    """The before/after table and v2's full reading of the pooled directions."""

    rows: list[BeforeAfterRow]
    identified: IdentifiedResult


def before_after(frame: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> BeforeAfter:
    """Per manipulation and pooled: v1's and v2's AUROC slopes."""
    pooled = frame[~frame["manipulation"].map(is_control)].reset_index(drop=True)
    names = [m for m in pooled["manipulation"].unique() if m != REFERENCE]
    curves = [(str(m), _curve(pooled, m)) for m in names] + [("pooled", pooled)]
    rows = [
        BeforeAfterRow(
            manipulation=m,
            v1=stats.fe_coefficients(
                curve, "effect", ["auroc", "cos_ref"], n_boot=n_boot, seed=seed
            )["auroc"],
            v2=flexible_slope(curve, "effect", "auroc", n_boot=n_boot, seed=seed),
        )
        for m, curve in curves
    ]
    return BeforeAfter(rows=rows, identified=identified_analysis(pooled, n_boot=n_boot, seed=seed))


def markdown(result: BeforeAfter) -> str:
    lines = [
        "| manipulation | v1: AUROC slope beside a line in cos | v2: beside a spline in cos |",
        "|---|---|---|",
    ]
    for r in result.rows:
        v2_text = estimate_of(r.v2) if r.v2.estimate is not None else "not identified"
        lines.append(f"| {r.manipulation} | {estimate_of(r.v1)} | {v2_text} |")
    return "\n".join(lines) + "\n"
