"""Section ``e2e`` (c, d): the whole default ``make run`` workload in a fresh subprocess.

Wall time by stage and peak resident memory, with warm caches and a temporary MLflow
store. The child is this module: ``python -m experiments.bench.e2e '<json spec>'``.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from experiments.bench.core.measure import contention, rounded
from experiments.bench.core.options import E2E_MARKER, TRACKING_STAGES, BenchOptions

CHILD_MODULE = "experiments.bench.e2e"


def _status_kb(field: str) -> int | None:
    """A ``/proc/self/status`` memory field in kB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        pass
    return None


def _reset_peak_rss() -> bool:
    """Restart the kernel's peak-RSS counter (VmHWM) from the current RSS."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:  # pragma: no cover - not Linux, or not permitted
        return False


class PeakMemory:
    """Peak resident memory per phase of a run, from the kernel's high-water mark.

    ``ru_maxrss`` is not used: on Linux a child spawned with vfork carries the parent's
    peak into its own at exec, so it reports the bench process, not the run. VmHWM belongs
    to the process's own address space, and resetting it at each phase boundary gives the
    exact peak of each phase."""

    def __init__(self) -> None:
        self.phase = "start (interpreter, imports, config)"
        self.peaks: dict[str, int] = {}
        self.resettable = True

    def enter(self, phase: str) -> None:
        self._close()
        self.phase = phase
        self.resettable = _reset_peak_rss() and self.resettable

    def _close(self) -> None:
        hwm = _status_kb("VmHWM")
        if hwm is not None:
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), hwm * 1024)

    def finish(self) -> tuple[int, dict[str, int]]:
        self._close()
        return max(self.peaks.values(), default=0), dict(self.peaks)


def run_e2e_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Inside the subprocess: the default ``make run`` workload, in-process, timed."""
    memory = PeakMemory()
    t0 = time.perf_counter()
    from experiments.bench.core.workload import pipeline_entry
    from experiments.bench.decode.dtype import dtype_name
    from experiments.config import load_config
    from experiments.rundir import RunDir, read_jsonl
    from steering.models import pick_device, pick_dtype

    run_pipeline = pipeline_entry()
    import_seconds = time.perf_counter() - t0
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    config = load_config(spec["config"], spec["overrides"])

    def progress(message: str) -> None:
        memory.enter("generation, perplexity, scoring" if message.startswith("run ") else message)

    start = time.perf_counter()
    result = run_pipeline(config, progress=progress)
    run_seconds = time.perf_counter() - start
    peak, by_phase = memory.finish()
    verdicts = {**result.criteria, **(result.effect.criteria if result.effect else {})}
    out = {
        "import_seconds": import_seconds,
        "run_seconds": run_seconds,
        "timings": result.timings,
        "tokens_per_second": result.tokens_per_second,
        # every text the run generated (all arms and splits), and the seed's report rows
        "n_generations": len(read_jsonl(Path(result.results_dir) / RunDir.GENERATIONS)),
        "n_report_rows": len(result.records),
        "peak_rss_bytes": peak,
        "peak_rss_by_phase_bytes": by_phase,
        "peak_per_phase_exact": memory.resettable,
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_threads": torch.get_num_threads(),
        "dtype": dtype_name(pick_dtype(pick_device(config.device), config.dtype)),
        # what the run concluded: a faster dtype that changes these is not a free speed-up
        "criteria": {k: {"status": c.status, "value": c.value} for k, c in verdicts.items()},
    }
    if torch.cuda.is_available() and config.device != "cpu":
        out["gpu_peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return out


BF16_ARM = "bfloat16"


def _child(spec: dict[str, Any], store: Path) -> dict[str, Any]:
    """One ``make run`` workload in a fresh process; its report, with the wall time."""
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlruns.db'}",
        "MLFLOW_ARTIFACT_ROOT": str(store / "mlartifacts"),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    load = contention()
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", CHILD_MODULE, json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    lines = [x for x in proc.stdout.splitlines() if x.startswith(E2E_MARKER)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"the end-to-end run failed (exit {proc.returncode}):\n{tail}")
    child: dict[str, Any] = json.loads(lines[-1][len(E2E_MARKER) :])
    child["process_wall_seconds"] = wall
    child["load_average_before"] = load
    return child


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["process_wall_seconds"] for r in runs]
    pick = runs[walls.index(sorted(walls)[(len(walls) - 1) // 2])]  # the median run
    stages = {k: round(v, 3) for k, v in pick["timings"].items()}
    accounted = sum(stages.values())
    groups = {
        "perplexity": stages.get("perplexity", 0.0),
        "measurement": stages.get("measurement", 0.0),
        "tracking": round(sum(stages.get(k, 0.0) for k in TRACKING_STAGES), 3),
    }
    return {
        "how": f"python -m {CHILD_MODULE}: load_config + run_phase5 in a fresh process "
        "(model and embedder loads included), warm classifiers, temporary MLflow store",
        "repeats": len(runs),
        "process_wall_seconds": [round(w, 2) for w in walls],
        "median_process_wall_seconds": round(statistics.median(walls), 2),
        "run_phase5_seconds": round(pick["run_seconds"], 2),
        "import_seconds": round(pick["import_seconds"], 2),
        "stages_seconds": stages,
        "stage_groups_seconds": groups,
        "tracking_stages": list(TRACKING_STAGES),
        "unaccounted_seconds": round(pick["run_seconds"] - accounted, 2),
        "generation_tokens_per_second": rounded(pick["tokens_per_second"], 2),
        "n_generations": pick["n_generations"],
        "n_report_rows": pick.get("n_report_rows"),
        "peak_rss_bytes": pick["peak_rss_bytes"],
        "peak_rss_gb": round(pick["peak_rss_bytes"] / 1e9, 3),
        "peak_rss_by_phase_gb": {
            k: round(v / 1e9, 3) for k, v in pick["peak_rss_by_phase_bytes"].items()
        },
        "peak_memory_how": "VmHWM of the run's own process, reset at each phase boundary "
        "(ru_maxrss of a vfork'd child includes the parent's peak on Linux)",
        "gpu_peak_bytes": pick.get("gpu_peak_bytes"),
        "torch_threads": pick["torch_threads"],
        "criteria": pick.get("criteria"),
        "runs": runs,
    }


def section_e2e(
    opts: BenchOptions,
    overrides: list[str],
    store: Path,
    say: Callable[[str], None],
    bf16_arm: bool = False,
) -> dict[str, Any]:
    """(c) wall time by stage and (d) peak memory of ``make run``, in a fresh subprocess.

    With ``bf16_arm`` (an fp32 run on a CPU with bf16 instructions) the same workload also
    runs in bf16, alternated repeat by repeat after one untimed bf16 run that trains its
    classifiers (probes carry their dtype). bf16 changes every sampled text and can change
    the criteria, so it is reported beside the default, never in its place."""
    spec: dict[str, Any] = {
        "config": str(opts.config),
        "overrides": [*overrides, f"tracking.results_dir={store / 'results'}"],
        "threads": opts.threads,
    }
    bf16_spec = {**spec, "overrides": [*spec["overrides"], f"dtype={BF16_ARM}"]}
    if bf16_arm:
        say("end to end: one untimed bf16 run (its classifiers, warm caches)")
        _child(bf16_spec, store)
    runs: list[dict[str, Any]] = []
    bf16_runs: list[dict[str, Any]] = []
    for i in range(opts.e2e_repeats):
        say(f"end to end: make run's workload in a subprocess ({i + 1}/{opts.e2e_repeats})")
        runs.append(_child(spec, store))
        if bf16_arm:
            say(f"end to end: the same in bf16 ({i + 1}/{opts.e2e_repeats})")
            bf16_runs.append(_child(bf16_spec, store))
    out = _summary(runs)
    if bf16_runs:
        out[BF16_ARM] = _summary(bf16_runs)
        out["ratio_default_over_bf16"] = round(
            out["median_process_wall_seconds"] / out[BF16_ARM]["median_process_wall_seconds"], 3
        )
    return out


def main(argv: Sequence[str]) -> int:
    """``python -m experiments.bench.e2e '<json spec>'``: the end-to-end child process."""
    if len(argv) == 1:
        logging.basicConfig(level=logging.WARNING)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        out = run_e2e_child(json.loads(argv[0]))
        print(E2E_MARKER + json.dumps(out), flush=True)
        return 0
    print("usage: steer-eval bench (this module's own entry point is internal)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover - the e2e child
    sys.exit(main(sys.argv[1:]))
