"""``run_bench``: load the model and workload once, run the chosen sections, write results.

Each section is checkpointed into the results file as soon as it finishes, with the load
average before and after it, so an interrupted bench keeps what it measured.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from experiments.bench.batched import run_batched, run_per_sample, section_batched, warm_up
from experiments.bench.dtype import dtype_name, other_precision, section_dtype
from experiments.bench.e2e import section_e2e
from experiments.bench.llama import (
    close,
    gguf_for,
    llama_unavailable,
    open_llamas,
    run_llama,
    section_llama,
)
from experiments.bench.measure import (
    Measurement,
    Run,
    Stream,
    contention,
    cpu_pressure,
    load_average,
    machine_info,
    measure_side_by_side,
    torch_threads,
)
from experiments.bench.options import SCHEMA_VERSION, SECTIONS, BenchOptions
from experiments.bench.report import evaluate_targets
from experiments.bench.scaling import section_scaling
from experiments.bench.tuning import section_tuning
from experiments.bench.workload import Workload, plan_workload, stratified_subset
from steering.models import LoadedModel


@contextlib.contextmanager
def isolated_store(root: Path) -> Iterator[None]:
    """Point MLflow at a temporary store, so the bench never writes into mlruns.db."""
    keys = ("MLFLOW_TRACKING_URI", "MLFLOW_ARTIFACT_ROOT")
    old = {k: os.environ.get(k) for k in keys}
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlruns.db'}"
    os.environ["MLFLOW_ARTIFACT_ROOT"] = str(root / "mlartifacts")
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def write_results(results: dict, out: Path | None) -> None:
    """Atomically replace ``out`` with the results so far (None: keep them in memory)."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str) + "\n")
    tmp.replace(out)


def default_work_dir() -> Path:
    from steering.assets import cache_dir

    return cache_dir() / "bench"


def new_results(opts: BenchOptions) -> dict:
    """The results skeleton: provenance first, sections filled in as they finish."""
    results: dict = {
        "schema": SCHEMA_VERSION,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "complete": False,
        "argv": sys.argv[1:],
        "options": opts.to_dict(),
        "machine": {},
        "load_average": {"start": load_average()},
        "cpu_pressure_avg60": {"start": cpu_pressure()},
        "sections": {},
        "targets": [],
        "notes": [],
    }
    try:
        from experiments.tracking import git_commit

        results["git"] = git_commit()
    except Exception:  # pragma: no cover - provenance only
        results["git"] = None
    return results


def run_bench(
    opts: BenchOptions,
    lm: LoadedModel | None = None,
    workload: Workload | None = None,
    embedder: Any = None,
    say: Callable[[str], None] | None = None,
) -> dict:
    """Run the chosen sections and return (and write) the results.

    With ``workload`` given (tests: a synthetic grid on a tiny model) the Phase 5 plan is not
    built, so the Δ comparison, llama.cpp (needs the GGUF) and e2e sections are skipped.
    """
    from experiments.config import load_config
    from steering.models import load_model

    say = say or (lambda _m: None)
    sections = [s for s in SECTIONS if s in opts.sections]
    overrides = list(opts.overrides)
    if opts.device:
        overrides.append(f"device={opts.device}")
    if opts.dtype:
        overrides.append(f"dtype={opts.dtype}")
    with contextlib.ExitStack() as stack:
        store = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="steer-eval-bench-")))
        stack.enter_context(isolated_store(store))
        stack.enter_context(torch_threads(opts.threads))
        work = opts.work_dir or default_work_dir()
        overrides.append(f"classifier.dir={(work / 'classifiers').resolve()}")
        config = load_config(opts.config, overrides)
        results = new_results(opts)
        started = time.perf_counter()
        if lm is None:
            say(f"loading {config.model} ({config.device}, {config.dtype})")
            t = time.perf_counter()
            lm = load_model(config.model, device=config.device, dtype=config.dtype)
            results["model_load_seconds"] = round(time.perf_counter() - t, 2)
        results["machine"] = machine_info(lm.device)
        results["model"] = {"id": lm.model_id, "dtype": dtype_name(lm.dtype), "layers": lm.n_layers}
        if workload is None:
            if embedder is None:
                from metrics.embedder import load_embedder

                embedder = load_embedder(config.embedding.model)
            say("classifiers (trained once into the bench cache), vectors, centroids")
            workload = plan_workload(config, lm, embedder)
        wl = workload
        results["workload"] = wl.describe()
        warm_up(lm, wl)
        sec = results["sections"]

        def checkpoint(name: str, value: dict, load_before: dict | None) -> None:
            value["load_average"] = {"before": load_before, "after": contention()}
            sec[name] = value
            results["targets"] = evaluate_targets(sec)
            write_results(results, opts.out)

        ours = dtype_name(lm.dtype)
        measured: dict[str, Measurement] = {}
        if {"batched", "dtype", "llama"} & set(sections):
            measured = _side_by_side(
                lm, wl, opts, config, sections, ours, embedder, results, checkpoint, say
            )
        if "tuning" in sections:
            load = contention()
            checkpoint("tuning", section_tuning(lm, wl, opts, say), load)
        if "scaling" in sections:
            load = contention()
            checkpoint("scaling", section_scaling(lm, wl, opts, measured.get(ours), say), load)
        if "e2e" in sections:
            if wl.plan is None:
                sec["e2e"] = {"skipped": "no Phase 5 config workload (synthetic rows)"}
            else:
                load = contention()
                checkpoint("e2e", section_e2e(opts, overrides, store, say), load)
        results["load_average"]["end"] = load_average()
        results["cpu_pressure_avg60"]["end"] = cpu_pressure()
        results["total_seconds"] = round(time.perf_counter() - started, 1)
        results["targets"] = evaluate_targets(sec)
        results["complete"] = True
        write_results(results, opts.out)
    return results


def _side_by_side(
    lm: LoadedModel,
    wl: Workload,
    opts: BenchOptions,
    config: Any,
    sections: list[str],
    ours: str,
    embedder: Any,
    results: dict,
    checkpoint: Callable[[str, dict, dict | None], None],
    say: Callable[[str], None],
) -> dict[str, Measurement]:
    """Sections batched, dtype and llama: one interleaved measurement, three reports."""
    load = contention()
    batched_runs: dict[str, Run] = {ours: lambda m: run_batched(lm, wl, m=m)}
    other = None
    if "dtype" in sections:
        other, _ = other_precision(lm, config.model if wl.plan else None)
        warm_up(other, wl)
        batched_runs[dtype_name(other.dtype)] = lambda m: run_batched(other, wl, m=m)
    streams: dict[str, Stream] = {}
    subset = stratified_subset(wl, min(opts.per_sample_limit, len(wl.rows)))
    if "batched" in sections:
        streams["per_sample"] = Stream(subset, lambda rows: run_per_sample(lm, wl, rows))
        streams["one_row_at_a_time"] = Stream(
            subset, lambda rows: run_batched(lm, wl, rows=rows, batch_size=1)
        )
    llamas: dict[int, Any] = {}
    gguf = gguf_for(config.model)
    llama_reason = None
    llama_subset = stratified_subset(wl, min(opts.llama_limit, len(wl.rows)))
    gpu = False
    if "llama" in sections:
        llama_reason = (
            "synthetic rows: the model is not the config's GGUF"
            if wl.plan is None
            else llama_unavailable(gguf, wl)
        )
        if llama_reason is None:
            assert gguf is not None
            llamas, gpu = open_llamas(lm, gguf, opts, wl)
            for t, llm in llamas.items():
                streams[f"llama.cpp/{t}"] = Stream(
                    llama_subset, lambda rows, llm=llm: run_llama(llm, wl, rows, lm.n_layers)
                )
    say(
        f"batched: {len(wl.rows)} rows x {wl.sampling.max_new_tokens} tokens "
        f"({', '.join(batched_runs)}), interleaved with {', '.join(streams) or 'nothing'}"
    )
    measured = measure_side_by_side(batched_runs, streams, opts.repeats, say)
    for llm in llamas.values():
        close(llm)
    if "batched" in sections:
        checkpoint("batched", section_batched(wl, measured, ours, subset), load)
    if other is not None:
        say("dtype: scoring Δ under each dtype")
        checkpoint("dtype", section_dtype(lm, other, wl, measured, embedder), load)
    if "llama" in sections:
        if llama_reason:
            results["sections"]["llama"] = {"skipped": llama_reason}
            results["notes"].append(f"llama.cpp section skipped: {llama_reason}")
        else:
            assert gguf is not None
            value = section_llama(lm, wl, opts, gguf, measured, ours, llama_subset, gpu, say)
            checkpoint("llama", value, load)
    return measured
