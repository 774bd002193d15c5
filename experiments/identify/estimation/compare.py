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
from typing import Any

import pandas as pd

from experiments.answer import interval_dict_text
from experiments.identify.estimation import stats
from experiments.identify.estimation.estimator import flexible_slope, identified_analysis
from experiments.identify.stages.directions import REFERENCE
from experiments.identify.stages.manipulations import family, is_control
from experiments.rundir import RunDir


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


def before_after(frame: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Per manipulation and pooled: v1's and v2's AUROC slopes (JSON-able)."""
    pooled = frame[~frame["manipulation"].map(is_control)].reset_index(drop=True)
    rows = []
    names = [m for m in pooled["manipulation"].unique() if m != REFERENCE]
    for m in names:
        curve = _curve(pooled, m)
        v1 = stats.fe_coefficients(curve, "effect", ["auroc", "cos_ref"], n_boot=n_boot, seed=seed)
        v2 = flexible_slope(curve, "effect", "auroc", n_boot=n_boot, seed=seed)
        rows.append({"manipulation": m, "v1": v1["auroc"].to_dict(), "v2": v2.to_dict()})
    v1 = stats.fe_coefficients(pooled, "effect", ["auroc", "cos_ref"], n_boot=n_boot, seed=seed)
    v2 = flexible_slope(pooled, "effect", "auroc", n_boot=n_boot, seed=seed)
    rows.append({"manipulation": "pooled", "v1": v1["auroc"].to_dict(), "v2": v2.to_dict()})
    return {"rows": rows, "identified": identified_analysis(pooled, n_boot=n_boot, seed=seed)}


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| manipulation | v1: AUROC slope beside a line in cos | v2: beside a spline in cos |",
        "|---|---|---|",
    ]
    for r in result["rows"]:
        v2 = r["v2"]
        v2_text = interval_dict_text(v2) if v2.get("estimate") is not None else "not identified"
        lines.append(f"| {r['manipulation']} | {interval_dict_text(r['v1'])} | {v2_text} |")
    return "\n".join(lines) + "\n"
