"""Exploratory, after v4's primaries were scored: does the dose carry the slope?

Every built direction steers at its concept's one β with the same norm, but not with the
same push on the next-token distribution: the whitened (shrinkage) path detects best and
moves the next token furthest. Here, over the primaries' rows (the committed shards'
``directions.csv``), each family's means, and the within-concept slope of the likelihood
effect on AUROC alone and beside log next-token KL (the dose), for P1's rows and P2's:

    python bench/identify_v4_pooled/dose.py   # writes dose.json beside it

Within-concept OLS (every variable centred per concept) with a concept bootstrap (2,000
draws, seed 0, percentile 95%), written out here because the identify estimators take no
dose covariate for the practitioner rows; the point is a side-by-side on the same rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "identify_v4_outcome_check"))
from slopes import concept_resamples  # noqa: E402  (the outcome check's concept bootstrap)

SHARDS = HERE.parents[1] / "results-heldout/phase6-identify-v4"
BUILT = ("reference", "logistic", "shrinkage", "size")


def centred(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    by = frame.groupby("concept")[columns]
    return (frame[columns] - by.transform("mean")).to_numpy(dtype=np.float64)


def slopes(frame: pd.DataFrame, x: list[str]) -> np.ndarray:
    design, y = centred(frame, x), centred(frame, ["effect"])[:, 0]
    return np.linalg.lstsq(design, y, rcond=None)[0]


def bootstrap(frame: pd.DataFrame, x: list[str]) -> dict:
    reps = [slopes(sample, x) for sample in concept_resamples(frame)]
    low, high = np.percentile(np.array(reps), [2.5, 97.5], axis=0)
    return {
        name: {"estimate": float(e), "low": float(lo), "high": float(hi)}
        for name, e, lo, hi in zip(x, slopes(frame, x), low, high, strict=True)
    }


def main() -> None:
    frames = [pd.read_csv(p) for p in sorted(SHARDS.glob("shard-*/directions.csv"))]
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[rows["manipulation"].isin(BUILT)].assign(log_kl=lambda d: np.log(d["kl"]))
    means = rows.groupby("manipulation")[["auroc", "effect", "kl", "cos_ref"]].mean()
    out: dict[str, object] = {
        "n_concepts": int(rows["concept"].nunique()),
        "family_means": means.round(4).to_dict(orient="index"),
    }
    for label, part in (("P1 rows", rows), ("P2 rows", rows[rows["manipulation"] != "size"])):
        out[label] = {
            "n_rows": len(part),
            "auroc alone": bootstrap(part, ["auroc"]),
            "auroc beside log kl": bootstrap(part, ["auroc", "log_kl"]),
        }
    (HERE / "dose.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
