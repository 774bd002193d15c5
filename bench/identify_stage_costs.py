"""Write ``bench/identify_stage_costs.json``: an identify run's stage costs per concept.

    python bench/identify_stage_costs.py results/identify/<run id> [--device cpu/float32]

Reads the finished run's ``analysis.json`` (its ``timings``, the same numbers as its
``time/<stage>`` metrics, and its concepts), divides every stage but the ones paid once
per run (``experiments/identify/heldout/cost.FIXED``) by the concepts, and writes the file that
``steer-eval identify --dry-run`` falls back on where the MLflow store holds no earlier
run of the same model on the same device. Nothing is run: only a finished run is read.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

from experiments.identify.heldout.cost import BENCH, costs_from_record


def cpu() -> str:
    """The CPU's model name and the flags the numbers depend on (``platform.processor()``
    is empty on Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.processor() or platform.machine()
    info = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in text.splitlines())
    )
    flags = set(info.get("flags", "").split())
    wanted = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
    cores = text.count("processor\t:")
    return (
        f"{info.get('model name', '?')}, {cores} vCPUs: {' '.join(f for f in wanted if f in flags)}"
    )


def torch_version() -> str:
    import torch

    return str(torch.__version__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished identify run folder")
    parser.add_argument("--device", default="cpu/float32", help="where it ran: type/dtype")
    parser.add_argument("--out", type=Path, default=BENCH)
    parser.add_argument("--note", default="", help="how it ran: load, cores, beside what")
    args = parser.parse_args()
    costs = costs_from_record(args.run, args.device)
    data = {
        **costs.to_dict(),
        "source": str(args.run),
        "machine": {"host": platform.node(), "processor": cpu(), "torch": torch_version()},
        **({"note": args.note} if args.note else {}),
        "how": f"python bench/identify_stage_costs.py {args.run} --device {args.device}",
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: {costs.concept_seconds / 60:.2f} min per concept")


if __name__ == "__main__":
    main()
