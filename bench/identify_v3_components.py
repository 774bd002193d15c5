"""identify v3's measured variance components, in the form ``--simulate --components`` reads.

`python bench/identify_v3_components.py bench/identify_v3_components.json` (seconds):
the ``measured`` block is the pooled practitioner components that
``steer-eval identify --config configs/identify-v3.yaml --pool --exploratory`` wrote to
``results-heldout/phase6-identify-v3/pooled/exploratory.json`` ("components": the 300
held-out concepts, all four built families, ``variance.components``), copied as they are
so the v4 design gate (``identify --config configs/identify-v4.yaml --simulate
--components bench/identify_v3_components.json``) takes its noise from v3's data. Beside
it, for reference only, the same decomposition on each co-primary's own rows
(``variance.BUILT_FAMILIES``) recomputed from the committed shards' ``directions.csv``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from experiments.identify.estimation.variance import BUILT_FAMILIES, components
from experiments.record.pooled import Components

ROOT = Path("results-heldout/phase6-identify-v3")


def main(out: str) -> None:
    exploratory = json.loads((ROOT / "pooled" / "exploratory.json").read_text(encoding="utf-8"))
    measured = Components(**exploratory["components"])  # refuses a block that does not fit
    shards = sorted(ROOT.glob("shard-*/directions.csv"))
    frame = pd.concat([pd.read_csv(p) for p in shards], ignore_index=True)
    by_population = {
        name: components(frame[frame["manipulation"].isin(families)], population="practitioner")
        for name, families in BUILT_FAMILIES.items()
    }
    record = {
        "what": "identify v3's pooled held-out variance components (the practitioner's "
        "population: v*, logistic, shrinkage, size), for --simulate --components",
        "source": str(ROOT / "pooled" / "exploratory.json") + ' ("components")',
        "how": "python bench/identify_v3_components.py bench/identify_v3_components.json",
        "measured": measured.to_dict(),
        "by_estimator": {
            name: {"families": list(BUILT_FAMILIES[name]), **c.to_dict()}
            for name, c in by_population.items()
        },
        "by_estimator_note": "recomputed from the committed shards "
        f"({len(shards)} directions.csv); practitioner equals 'measured'. Not read by "
        "--components: one toy serves every co-primary, so its noise is the pooled one",
    }
    Path(out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/identify_v3_components.json")
