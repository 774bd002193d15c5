"""Section ``load``: the same warm generation quiet and beside a busy process, with
torch's threads at one per core (before) and from the free cores (after).

Issue 55, item 8: on 2 cores with one held by a busy single-threaded process, torch's
default of a thread per core made generation 3.5× slower than quiet, because every
parallel region waits for the thread that shares its core with the other process. The
CPU platform now takes its thread count from the cores free when a run starts
(``steering.platform.CpuPlatform.choose_threads``). This section measures both counts
in one run, interleaved: each repeat runs quiet (both arms), then starts the busy
process (``python -c "while True: pass"``), lets the platform choose under it, runs both
arms and stops it. The ratios busy / quiet, before and after, go to the results file,
with whether every arm wrote the same tokens.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from experiments.bench.core.measure import Measurement, contention, ratio, rounded, torch_threads
from experiments.bench.core.options import BenchOptions
from experiments.bench.core.workload import Workload, scaled_workload
from experiments.bench.decode.batched import run_batched
from steering.cpu import cpu_features, usable_cpus
from steering.models import LoadedModel

BUSY_CODE = "while True: pass"
SETTLE_SECONDS = 1.0  # the busy process running before the platform measures the load
TARGET = 1.5  # busy / quiet generation time with the threads from the free cores


@contextlib.contextmanager
def busy_process() -> Iterator[int]:
    """One busy single-threaded process for the block (its pid), killed after."""
    proc = subprocess.Popen([sys.executable, "-c", BUSY_CODE])
    try:
        time.sleep(SETTLE_SECONDS)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def cpu_flags() -> dict[str, Any]:
    """The CPU's model and the flags that decide the decode's speed (``lscpu``'s, as
    /proc/cpuinfo gives them)."""
    f = cpu_features()
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
    return {
        "model": f.model,
        "logical_cpus": f.logical_cpus,
        "usable_cpus": len(usable_cpus()),
        "flags": [x for x in wanted if x in f.flags],
    }


def chosen_threads(lm: LoadedModel) -> dict[str, Any]:
    """What the platform chooses now (its count restored after: the arms set their own)."""
    with torch_threads(torch.get_num_threads()):
        choice = lm.platform.choose_threads()
    return {"threads": choice.threads, "from": choice.describe()}


def section_load(
    lm: LoadedModel, wl: Workload, opts: BenchOptions, say: Callable[[str], None]
) -> dict[str, Any]:
    """Quiet and busy, threads before (one per usable CPU) and after (the platform's
    choice at that moment), ``opts.repeats`` interleaved rounds on ``opts.load_concepts``
    concepts of the grid."""
    work, how = scaled_workload(wl, opts.load_concepts)
    all_cores = len(usable_cpus())
    arms: dict[str, Measurement | None] = dict.fromkeys(
        ("quiet/before", "quiet/after", "busy/before", "busy/after")
    )
    choices: dict[str, list[dict[str, Any]]] = {"quiet": [], "busy": []}
    loads: dict[str, list[dict[str, Any]]] = {"quiet": [], "busy": []}
    tokens: dict[str, list[list[int]]] = {}

    def run(name: str, threads: int) -> None:
        with torch_threads(threads):
            m = run_batched(lm, work, m=arms[name])
        arms[name] = m
        tokens[name] = [g.token_ids for g in m.generations or []]

    say(
        f"load: {len(work.rows)} rows x {work.sampling.max_new_tokens} tokens, quiet and "
        f"beside a busy process, {all_cores} threads against the platform's choice"
    )
    for _ in range(opts.repeats):
        for condition in ("quiet", "busy"):
            with busy_process() if condition == "busy" else contextlib.nullcontext():
                choice = chosen_threads(lm)
                choices[condition].append(choice)
                loads[condition].append(contention())
                run(f"{condition}/before", all_cores)
                run(f"{condition}/after", choice["threads"])
    measured = {k: v for k, v in arms.items() if v is not None}
    seconds = {k: m.median_seconds for k, m in measured.items()}
    reference = tokens.get("quiet/before")

    def slowdown(arm: str, against: str) -> float | None:
        return rounded(ratio(seconds.get(arm), seconds.get(against)), 3)

    return {
        "stage": "generation only (generate_batch over the grid, warm), as make run does",
        "workload": how,
        "rows": len(work.rows),
        "max_new_tokens": work.sampling.max_new_tokens,
        "busy_process": f"{sys.executable} -c {BUSY_CODE!r}, started {SETTLE_SECONDS:g} s "
        "before the platform measures the load",
        "cpu": cpu_flags(),
        "threads_before": all_cores,
        "threads_after": choices,
        "load_per_round": loads,
        "runs": {k: m.to_dict() for k, m in measured.items()},
        # busy / quiet at each thread rule, and busy after against quiet as it was
        "ratio_busy_vs_quiet_before": slowdown("busy/before", "quiet/before"),
        "ratio_busy_vs_quiet_after": slowdown("busy/after", "quiet/after"),
        "ratio_busy_after_vs_quiet_before": slowdown("busy/after", "quiet/before"),
        "ratio_quiet_after_vs_before": slowdown("quiet/after", "quiet/before"),
        "target_busy_vs_quiet_after": f"<= {TARGET:g}",
        "same_tokens_as_quiet_before": {k: v == reference for k, v in tokens.items()},
    }
