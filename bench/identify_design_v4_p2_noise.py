"""The v4 design gate's power with P2's own noise (a sensitivity check, not the gate).

Run as `OMP_NUM_THREADS=1 python bench/identify_design_v4_p2_noise.py OUT.json` (one BLAS
thread, as the gate ran; OUT: bench/identify_design_v4_p2_noise.json).
``identify --simulate`` serves both co-primaries with one toy, whose noise is v3's pooled
practitioner components (``bench/identify_v3_components.json``, "measured": τ 0.69,
residual sd 0.24). On P2's own rows v3 measured more between-concept spread and less
residual (``by_estimator.practitioner_full_data``: τ 0.83, residual sd 0.21), and τ is
what an equivalence reading over many concepts pays for. This runs the toys of
``flat_readout`` (where both primaries' truth is 0, the class v4 states its power in)
with those components instead, P1 and P2 read by Holm as in the gate, at the numbers of
concepts of the gate's power curve; same seeds, toys and replicates as the committed
table (``bench/identify_design_v4_n294.json``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from experiments.config import IdentifyStudyConfig, load_config
from experiments.identify.estimation.variance import Components
from experiments.identify.simulation.design import measured_toy, primary_of, simulate

SIZES = (294, 450, 600)
TOYS, N_BOOT, SEED = 50, 499, 0
KEYS = ("truth", "coverage", "power", "no_practical_0", "width", "verdicts_null", "holm_step_null")


def main(out: str) -> None:
    config = load_config("configs/identify-v4.yaml", [], "identify", [])
    if not isinstance(config, IdentifyStudyConfig):
        raise TypeError(f"configs/identify-v4.yaml is not an identify config: {type(config)}")
    primary = primary_of(config)
    kept = json.loads(Path("bench/identify_v3_components.json").read_text(encoding="utf-8"))
    block = dict(kept["by_estimator"]["practitioner_full_data"])
    block.pop("families")
    measured = Components(**block)
    toy = measured_toy(config.identify, measured, SEED, "practitioner")
    rows = []
    start = time.monotonic()
    for n in SIZES:
        for r in simulate(config.identify, primary, toys=TOYS, seed=SEED, n_boot=N_BOOT,
                          n_concepts=n, classes=["flat_readout"], toy=toy,
                          primary_only=True):  # fmt: skip
            rows.append({"n_concepts": n, "primary": r["estimand"], **{k: r[k] for k in KEYS}})
    record = {
        "what": "P1 and P2 read by Holm in flat_readout with v3's components measured on "
        "P2's rows (a sensitivity check of the v4 gate's power)",
        "how": "python bench/identify_design_v4_p2_noise.py bench/identify_design_v4_p2_noise.json",
        "measured": measured.to_dict(),
        "toy": toy,
        "toys_per_arm": TOYS,
        "n_boot": N_BOOT,
        "seed": SEED,
        "seconds": round(time.monotonic() - start),
        "rows": rows,
    }
    Path(out).write_text(json.dumps(record, indent=1, default=float) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/identify_design_v4_p2_noise.json")
