"""Exploratory, after the outcome check's rule was read: the within-concept slope on AUROC
of each outcome among the four checked directions (v*, logistic:1, shrinkage:0.1,
size:2x2x2), on the generated Δ (gated, and ungated) and on the likelihood, with and without the
shrinkage path, and each direction's means.

    python bench/identify_v4_outcome_check/slopes.py   # writes slopes.json beside it

Within-concept OLS (both variables centred per concept) with a concept bootstrap (2,000
draws, seed 0, percentile 95%): written out here rather than through the identify
estimator because the generated outcome is not an outcome that estimator takes, and the
point is a side-by-side of the two outcomes on the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
RUN = HERE / "run"


def within_slope(frame: pd.DataFrame, y: str, x: str = "auroc") -> float:
    by = frame.groupby("concept")
    dx = frame[x] - by[x].transform("mean")
    dy = frame[y] - by[y].transform("mean")
    return float((dx * dy).sum() / (dx * dx).sum())


def concept_resamples(frame: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """The 2,000 concept-bootstrap samples (seed 0), each drawn concept one of its own."""
    rng = np.random.default_rng(0)
    parts = dict(list(frame.groupby("concept")))
    names = np.array(sorted(parts))
    for _ in range(2000):
        pick = rng.choice(names, len(names))
        yield pd.concat(
            [parts[c].assign(concept=f"{c}#{i}") for i, c in enumerate(pick)], ignore_index=True
        )


def bootstrap(frame: pd.DataFrame, y: str) -> dict[str, float]:
    slopes = [within_slope(sample, y) for sample in concept_resamples(frame)]
    low, high = np.percentile(slopes, [2.5, 97.5])
    return {"estimate": within_slope(frame, y), "low": float(low), "high": float(high)}


def main() -> None:
    cells = pd.read_csv(RUN / "validation_cells.csv")
    cells = cells[cells["sign"] == 1]
    directions = pd.read_csv(RUN / "directions.csv")[
        ["concept", "direction", "auroc", "effect", "kl"]
    ]
    rows = cells.merge(directions, on=["concept", "direction"])
    out: dict[str, object] = {"n_concepts": int(rows["concept"].nunique()), "n_rows": len(rows)}
    for label, part in (
        ("all four", rows),
        ("without shrinkage:0.1", rows[rows["direction"] != "shrinkage:0.1"]),
    ):
        out[label] = {
            "generated gated delta": bootstrap(part, "e_gen"),
            "generated delta, ungated": bootstrap(part, "e_gen_raw"),
            "likelihood (nats/token)": bootstrap(part, "effect"),
        }
    means = rows.groupby("direction")[
        ["auroc", "effect", "e_gen", "e_gen_raw", "kl", "gate"]
    ].mean()
    out["per_direction"] = {
        d: {k: round(float(v), 4) for k, v in r.items()} for d, r in means.iterrows()
    }
    (HERE / "slopes.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
