"""Scale-out measurements (the SCALE-OUT issue): local vs Ray on one config, Ray's start-up,
and the driver's MLflow logging cost per cell for each ``tracking.child_runs`` mode
against a loopback ``mlflow server``. Writes ``bench/scale_out.json``.

    .venv/bin/python bench/scale_out.py                  # everything, embedded default
    .venv/bin/python bench/scale_out.py --only logging   # logging cost only

Wall times on a shared machine are noisy: the load average is recorded with them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This checkout's packages, not whichever one an editable install points at.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")

OUT = Path(__file__).with_name("scale_out.json")


def machine() -> dict:
    flags = set()
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
        if line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "avx512": sorted(f for f in flags if f.startswith("avx512")),
        "avx2": "avx2" in flags,
        "python": platform.python_version(),
        "loadavg": os.getloadavg(),
    }


def phase5(config, lm, embedder, execution: dict | None):
    """One run; returns (result, generation wall seconds)."""
    from experiments.phase5.run import run_phase5

    marks: dict[str, float] = {}

    def say(msg: str) -> None:
        if "generating" in msg:
            marks["start"] = time.perf_counter()
        if msg.startswith("scoring"):
            marks["end"] = time.perf_counter()

    result = run_phase5(config, lm=lm, embedder=embedder, progress=say, execution=execution)
    return result, marks["end"] - marks["start"]


def compare(a, b) -> dict:
    from experiments.rundir import RunDir

    ra = {g["key"]: g for g in RunDir(a.results_dir.parent, a.run_id).read_scored()}
    rb = {g["key"]: g for g in RunDir(b.results_dir.parent, b.run_id).read_scored()}
    same_text = sum(ra[k]["text"] == rb[k]["text"] for k in ra if k in rb)
    same_delta = sum(ra[k]["delta"] == rb[k]["delta"] for k in ra if k in rb)
    return {
        "rows": len(ra),
        "same_keys": set(ra) == set(rb),
        "identical_texts": same_text,
        "identical_delta": same_delta,
        "identical_statistics": a.record.statistics == b.record.statistics,
    }


def executors(args, tmp: Path) -> dict:
    import torch

    from experiments.config import load_config
    from experiments.execution.ray import RayExecutor, import_ray
    from metrics.embedder import load_embedder
    from steering.models import ModelSpec, load_model

    config = load_config(
        args.config,
        [
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
            *args.set,
        ],
    )
    lm = load_model(config.model, device=config.device, dtype=config.dtype)
    embedder = load_embedder(config.embedding.model, lm.platform.embedder_device)
    out: dict = {"config": args.config, "overrides": args.set, "threads": torch.get_num_threads()}
    # Ray's start-up, alone: ray.init, then actors loading the model.
    ray = import_ray()
    began = time.perf_counter()
    ray.init(include_dashboard=False, log_to_driver=False)
    out["ray_init_seconds"] = time.perf_counter() - began
    for workers, cpus in ((1, 2.0), (2, 1.0)):
        pool = RayExecutor(ModelSpec(config.model, config.device, config.dtype), workers, cpus)
        began = time.perf_counter()
        pool.start()
        out[f"actors_up_seconds_{workers}w"] = time.perf_counter() - began
        pool.close()
    ray.shutdown()
    runs = {}
    local, runs["local"] = phase5(config, lm, embedder, None)  # trains the probes too
    local, runs["local"] = phase5(config, lm, embedder, None)  # warm, as the Ray runs are
    results = {}
    for workers, cpus in ((1, 2.0), (2, 1.0)):
        name = f"ray_{workers}w"
        execution = {"executor": "ray", "workers": workers, "cpus_per_worker": cpus}
        results[name], runs[name] = phase5(config, lm, embedder, execution)
    out["generation_wall_seconds"] = runs
    out["rows"] = len(local.records)
    out["vs_local"] = {name: compare(local, r) for name, r in results.items()}
    out["loadavg_after"] = os.getloadavg()
    return out


def logging_cost(args, tmp: Path) -> dict:
    """ms per cell of ``log_children`` against a loopback server, for each mode."""
    import torch

    from experiments import tracking
    from experiments.concepts import load_concepts
    from experiments.config import load_config
    from experiments.phase5.context import RunContext
    from experiments.phase5.publish import log_children
    from experiments.phase5.run import run_phase5
    from experiments.tracking.server import running_server
    from metrics.embedder import load_embedder
    from steering.models import load_model

    config = load_config(
        args.config,
        [
            "generation.max_new_tokens=8",
            f"classifier.dir={tmp / 'cls'}",
            f"tracking.results_dir={tmp / 'res'}",
            "tracking.experiment=logging-cost",
            "tracking.child_runs=none",
        ],
    )
    torch.set_num_threads(2)
    out: dict = {"repeats": args.repeats}
    with running_server(tmp / "server") as uri:
        os.environ["MLFLOW_TRACKING_URI"] = uri
        lm = load_model(config.model, device=config.device, dtype=config.dtype)
        embedder = load_embedder("embedded", lm.platform.embedder_device)
        result = run_phase5(config, lm=lm, embedder=embedder)
        records = result.records
        n_cells = records.groupby(["concept", "strength"]).ngroups
        graph = load_concepts(config.concepts.file, limit=config.concepts.limit)
        rec = result.record

        def context(cfg, name: str) -> RunContext:
            """A fresh parent run for ``cfg`` with the finished run's model, layer, α, F1s."""
            run = tracking.start_run(cfg.tracking.experiment, name)
            return RunContext(run, cfg, graph, rec.model_id, rec.layer, rec.alpha, rec.predictors)

        for mode in ("per_cell", "per_concept", "none"):
            cfg = config.model_copy(deep=True)
            cfg.tracking.child_runs = mode
            times = []
            for _ in range(args.repeats):
                ctx = context(cfg, f"cost {mode}")
                began = time.perf_counter()
                log_children(ctx, records)
                times.append(time.perf_counter() - began)
                tracking.end_run(ctx.run_id)
            out[mode] = {
                "cells": n_cells,
                "seconds": times,
                "ms_per_cell_median": 1000 * statistics.median(times) / n_cells,
            }
        # The parent's cells.json alone (mode none) on a 100x grid: 3,000 cells.
        import pandas as pd

        copies = [records.assign(concept=records["concept"] + f"#{i}") for i in range(100)]
        big = pd.concat(copies, ignore_index=True)
        cfg = config.model_copy(deep=True)
        cfg.tracking.child_runs = "none"
        ctx = context(cfg, "cost none x100")
        began = time.perf_counter()
        log_children(ctx, big)
        seconds = time.perf_counter() - began
        cells = big.groupby(["concept", "strength"]).ngroups
        out["none_x100"] = {
            "cells": cells,
            "seconds": seconds,
            "ms_per_cell": 1000 * seconds / cells,
        }
        out["server"] = uri
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/phase5.yaml")
    parser.add_argument("--set", action="append", default=[], help="config overrides")
    parser.add_argument("--only", choices=["executors", "logging"], default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    report = json.loads(OUT.read_text()) if OUT.exists() else {}
    report["machine"] = machine()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{tmp}/mlruns.db")
        os.environ.setdefault("MLFLOW_ARTIFACT_ROOT", f"{tmp}/mlartifacts")
        if args.only in (None, "executors"):
            report["executors"] = executors(args, Path(tmp))
        if args.only in (None, "logging"):
            os.environ.pop("MLFLOW_TRACKING_URI", None)
            report["logging"] = logging_cost(args, Path(tmp))
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
