"""Coverage of the identify estimators on 200 toy studies per shape (issue 36).

`python bench/identify_coverage.py bench/identify_coverage.json` (about 10 min on 2 cores):
v2 (flexible), v1's model under the wild cluster bootstrap, v1 as it ran (concept
bootstrap), matched pairs; then a planted AUROC effect of 1 without measurement error.
"""

import json
import sys

import numpy as np
from threadpoolctl import threadpool_limits

from experiments.identify.estimation import stats
from experiments.identify.estimation.estimator import (
    flexible_slope,
    linear_cos_slope,
    matched_pairs,
    with_probit,
)
from experiments.identify.simulation.simulate import SHAPES, toy_study
from metrics.cluster import ClusterFit

N = 200
out = {}
with threadpool_limits(1):
    for shape in SHAPES:
        rows = {"v2": [], "v1_model_wild": [], "v1_concept_boot": [], "pairs": []}
        for s in range(N):
            f = with_probit(toy_study(10_000 + s, shape))
            pairs = matched_pairs(f, "effect", "auroc", n_boot=999, seed=s).fit
            for name, fit in (
                ("v2", flexible_slope(f, "effect", "auroc", n_boot=999, seed=s)),
                ("v1_model_wild", linear_cos_slope(f, "effect", "auroc", n_boot=999, seed=s)),
                ("pairs", pairs if pairs is not None else ClusterFit()),
            ):
                rows[name].append((fit.low, fit.high, fit.estimate))
            iv = stats.fe_coefficients(f, "effect", ["auroc", "cos_ref"], n_boot=500, seed=s)[
                "auroc"
            ]
            rows["v1_concept_boot"].append((iv.low, iv.high, iv.estimate))
        out[shape] = {
            k: {
                "coverage_of_0": float(np.mean([lo <= 0 <= hi for lo, hi, _ in v])),
                "mean_estimate": float(np.mean([e for *_, e in v])),
            }
            for k, v in rows.items()
        }
        print(shape, json.dumps(out[shape]), flush=True)
    planted = []
    for s in range(N):
        f = toy_study(20_000 + s, "concave", planted=1.0, measurement_sd=0.0)
        fit = flexible_slope(f, "effect", "auroc", n_boot=999, seed=s)
        planted.append((fit.low <= 1.0 <= fit.high, fit.low > 0, fit.estimate))
    out["planted_1_no_measurement_error"] = {
        "coverage_of_1": float(np.mean([p[0] for p in planted])),
        "excludes_0": float(np.mean([p[1] for p in planted])),
        "mean_estimate": float(np.mean([p[2] for p in planted])),
    }
    print("planted", json.dumps(out["planted_1_no_measurement_error"]), flush=True)
with open(sys.argv[1], "w") as handle:
    json.dump(out, handle, indent=1)
