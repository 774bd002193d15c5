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
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from experiments.bench.core.measure import (
    Measurement,
    Run,
    Stream,
    contention,
    cpu_pressure,
    interleaved,
    load_average,
    machine_info,
    measure_side_by_side,
    torch_threads,
)
from experiments.bench.core.options import (
    HF_BATCHED,
    SCHEMA_VERSION,
    SECTIONS,
    SIDE_BY_SIDE,
    BenchOptions,
)
from experiments.bench.core.workload import Workload, plan_workload, stratified_subset
from experiments.bench.decode.batched import run_batched, run_per_sample, section_batched, warm_up
from experiments.bench.decode.dtype import dtype_name, other_precision, section_dtype
from experiments.bench.decode.head import section_head
from experiments.bench.decode.load import section_load
from experiments.bench.decode.peers import (
    greedy_agreement,
    run_hf_batched,
    section_peers,
)
from experiments.bench.decode.profile import section_profile
from experiments.bench.decode.roofline import (
    PRODUCTS,
    SUSTAINED,
    run_products_only,
    run_sustained_matmul,
    section_roofline,
)
from experiments.bench.decode.scaling import section_scaling
from experiments.bench.decode.tuning import section_tuning
from experiments.bench.e2e import section_e2e
from experiments.bench.llamacpp.gguf_f32 import f32_gguf
from experiments.bench.llamacpp.llama import (
    SINGLE_STREAM,
    SINGLE_STREAM_F32,
    close,
    fastest,
    gguf_for,
    llama_unavailable,
    open_llamas,
    run_llama,
    runs_by_threads,
    section_llama,
)
from experiments.bench.llamacpp.llama_batch import HOW as LLAMA_BATCH_HOW
from experiments.bench.llamacpp.llama_batch import (
    LLAMA_BATCHED,
    MultiSequence,
    open_multi_sequence,
    run_llama_batched,
)
from experiments.bench.reporting.report import evaluate_targets
from steering.cpu import cpu_features
from steering.models import LoadedModel, ModelSpecError


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


def write_results(results: dict[str, Any], out: Path | None) -> None:
    """Atomically replace ``out`` with the results so far (None: keep them in memory)."""
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str) + "\n")
    tmp.replace(out)


def new_results(opts: BenchOptions) -> dict[str, Any]:
    """The results skeleton: provenance first, sections filled in as they finish."""
    results: dict[str, Any] = {
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
) -> dict[str, Any]:
    """Run the chosen sections and return (and write) the results.

    With ``workload`` given (tests: a synthetic grid on a tiny model) the Phase 5 plan is not
    built, so the Δ comparison, llama.cpp (needs the GGUF) and e2e sections are skipped.
    """
    from experiments.config import load_config
    from steering.assets import cache_dir
    from steering.models import pick_device

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
        work = opts.work_dir or cache_dir() / "bench"
        overrides.append(f"classifier.dir={(work / 'classifiers').resolve()}")
        config = load_config(opts.config, overrides)
        results = new_results(opts)
        started = time.perf_counter()
        # cuda without a GPU is refused here, before anything loads
        device = lm.device if lm is not None else pick_device(config.device)
        if "gpu" in sections:
            gpu_section(opts, device, sections, results, say)
            sections = [s for s in sections if s != "gpu"]
            if not sections:
                return finish(results, opts, started)
        if lm is None:
            say(f"loading {config.model} ({config.device}, {config.dtype})")
            t = time.perf_counter()
            lm = config.model_spec.load()
            results["model_load_seconds"] = round(time.perf_counter() - t, 2)
        results["machine"] = machine_info(lm.device)
        results["model"] = {"id": lm.model_id, "dtype": dtype_name(lm.dtype), "layers": lm.n_layers}
        if workload is None:
            if embedder is None:
                from experiments.kernel.lifecycle import embedder_device
                from metrics.embedder import load_embedder

                embedder = load_embedder(config.embedding.model, embedder_device(config, lm))
            say("classifiers (trained once into the bench cache), vectors, centroids")
            workload = plan_workload(config, lm, embedder)
        wl = workload
        results["workload"] = wl.describe()
        warm_up(lm, wl)
        sec = results["sections"]
        bench = Bench(lm, wl, opts, config, sections, embedder, results, say)
        measured: dict[str, Measurement] = {}
        if SIDE_BY_SIDE & set(sections):
            measured = bench.side_by_side()
        if "roofline" in sections:
            bench.roofline(measured)
        if "profile" in sections:
            say(f"profile: one batch, {opts.profile_tokens} decode steps")
        later: dict[str, Callable[[], dict[str, Any]]] = {
            "profile": lambda: section_profile(lm, wl, min(opts.profile_tokens, 64)),
            "head": lambda: section_head(lm, wl, opts, say),
            "tuning": lambda: section_tuning(lm, wl, opts, say),
            "scaling": lambda: section_scaling(lm, wl, opts, measured.get(bench.ours), say),
            "load": lambda: section_load(lm, wl, opts, say),
        }
        for name, section in later.items():
            if name in sections:
                load = contention()
                bench.checkpoint(name, section(), load)
        if "e2e" in sections:
            if wl.plan is None:
                sec["e2e"] = {"skipped": "no Phase 5 config workload (synthetic rows)"}
            else:
                load = contention()
                bf16_arm = (
                    bench.ours == "float32"
                    and lm.device.type == "cpu"
                    and cpu_features().native_bf16
                )
                value = section_e2e(opts, overrides, store, say, bf16_arm)
                bench.checkpoint("e2e", value, load)
        return finish(results, opts, started)


def finish(results: dict[str, Any], opts: BenchOptions, started: float) -> dict[str, Any]:
    """The closing figures (load, total time, targets); the file marked complete."""
    results["load_average"]["end"] = load_average()
    results["cpu_pressure_avg60"]["end"] = cpu_pressure()
    results["total_seconds"] = round(time.perf_counter() - started, 1)
    results["targets"] = evaluate_targets(results["sections"])
    results["complete"] = True
    write_results(results, opts.out)
    return results


def gpu_section(
    opts: BenchOptions,
    device: Any,
    sections: list[str],
    results: dict[str, Any],
    say: Callable[[str], None],
) -> None:
    """Section gpu (its own dummy model) on a CUDA device; elsewhere skipped with the way
    to run it, or refused when it is the only section asked for."""
    if device.type != "cuda":
        how = "section gpu needs a CUDA GPU: make bench ARGS='--device cuda --only gpu'"
        if sections == ["gpu"]:
            raise ModelSpecError(f"{how} (this run's device is {device})")
        results["sections"]["gpu"] = {"skipped": how}
        results["notes"].append(how)
        return
    from experiments.bench.gpu.gpu import section_gpu

    results["machine"] = results["machine"] or machine_info(device)
    load = contention()
    value = section_gpu(opts, device, say)
    value["load_average"] = {"before": load, "after": contention()}
    results["sections"]["gpu"] = value
    write_results(results, opts.out)


@dataclass
class Bench:
    """What every section of one bench run shares, and how a section's result is kept."""

    lm: LoadedModel
    wl: Workload
    opts: BenchOptions
    config: Any
    sections: list[str]
    embedder: Any
    results: dict[str, Any]
    say: Callable[[str], None]

    @property
    def ours(self) -> str:
        return dtype_name(self.lm.dtype)

    def checkpoint(
        self, name: str, value: dict[str, Any], load_before: dict[str, Any] | None
    ) -> None:
        """Keep a finished section, with the load around it, on disk at once."""
        value["load_average"] = {"before": load_before, "after": contention()}
        self.results["sections"][name] = value
        self.results["targets"] = evaluate_targets(self.results["sections"])
        write_results(self.results, self.opts.out)

    def llama_reason(self, gguf: Path | None) -> str | None:
        if not {"llama", "peers"} & set(self.sections):
            return "sections llama and peers not run"
        if self.wl.plan is None:
            return "synthetic rows: the model is not the config's GGUF"
        return llama_unavailable(gguf, self.wl)

    def side_by_side(self) -> dict[str, Measurement]:
        """Sections batched, dtype, llama and peers: one interleaved measurement."""
        lm, wl, opts, sections, ours = self.lm, self.wl, self.opts, self.sections, self.ours
        load = contention()
        batched_runs = self.ours_runs()
        other = None
        if "dtype" in sections:
            other, _ = other_precision(lm, self.config.model if wl.plan else None)
            warm_up(other, wl)
            batched_runs[dtype_name(other.dtype)] = lambda m: run_batched(other, wl, m=m)
        other_dtypes = [n for n in batched_runs if n not in (ours, PRODUCTS)]
        if "peers" in sections:
            batched_runs[HF_BATCHED] = lambda m: run_hf_batched(lm, wl, m=m)
        if "roofline" in sections and lm.device.type == "cpu":
            batched_runs[SUSTAINED] = run_sustained_matmul
        streams: dict[str, Stream] = {}
        subset = stratified_subset(wl, min(opts.per_sample_limit, len(wl.rows)))
        if "batched" in sections:
            streams["per_sample"] = Stream(subset, lambda rows: run_per_sample(lm, wl, rows))
            streams["one_row_at_a_time"] = Stream(
                subset, lambda rows: run_batched(lm, wl, rows=rows, batch_size=1)
            )
        gguf = gguf_for(self.config.model)
        reason = self.llama_reason(gguf)
        llama_subset = stratified_subset(wl, min(opts.llama_limit, len(wl.rows)))
        llamas: dict[int, Any] = {}
        f32_llamas: dict[int, Any] = {}  # the fp32 GGUF: a single-stream peer only
        engines: list[Any] = []
        gpu = False
        if reason is None:
            assert gguf is not None
            llamas, gpu = open_llamas(lm, gguf, opts, wl)
            if "llama" in sections:
                if opts.llama_f32:
                    f32_llamas, _ = open_llamas(lm, f32_gguf(gguf, self.say), opts, wl)
                for prefix, opened in ((SINGLE_STREAM, llamas), (SINGLE_STREAM_F32, f32_llamas)):
                    for t, llm in opened.items():
                        streams[f"{prefix}{t}"] = Stream(
                            llama_subset, partial(run_llama, llm, wl, n_layers=lm.n_layers)
                        )
            if "peers" in sections:
                for t, llm in llamas.items():
                    engine = open_multi_sequence(llm, wl, t)
                    run_llama_batched(engine, wl.with_tokens(2), wl.rows[:2], lm.n_layers)
                    engines.append(engine)

                    def llama_batched(
                        m: Measurement | None, e: MultiSequence = engine
                    ) -> Measurement:
                        return run_llama_batched(e, wl, n_layers=lm.n_layers, m=m)

                    batched_runs[f"{LLAMA_BATCHED}/{t}"] = llama_batched
        self.say(
            f"batched: {len(wl.rows)} rows x {wl.sampling.max_new_tokens} tokens "
            f"({', '.join(batched_runs)}), interleaved with {', '.join(streams) or 'nothing'}"
        )
        measured = measure_side_by_side(batched_runs, streams, opts.repeats, self.say)
        for engine in engines:
            engine.close()
        for llm in [*llamas.values(), *f32_llamas.values()]:
            close(llm)
        if "batched" in sections:
            value = section_batched(wl, measured, ours, subset, other_dtypes)
            self.checkpoint("batched", value, load)
        if other is not None:
            self.say("dtype: scoring Δ under each dtype")
            self.checkpoint("dtype", section_dtype(lm, other, wl, measured, self.embedder), load)
        if "llama" in sections:
            if reason:
                self.results["sections"]["llama"] = {"skipped": reason}
                self.results["notes"].append(f"llama section skipped: {reason}")
            else:
                assert gguf is not None
                value = section_llama(
                    lm, wl, opts, gguf, measured, ours, llama_subset, gpu, self.say, other_dtypes
                )
                self.checkpoint("llama", value, load)
        if "peers" in sections:
            self.peers(measured, reason, load)
        return measured

    def peers(
        self, measured: dict[str, Measurement], reason: str | None, load: dict[str, Any]
    ) -> None:
        """Section peers from the side-by-side measurement, plus the greedy check."""
        self.say("peers: greedy check that HF batched generate matches ours")
        n = min(self.opts.peer_agreement_rows, len(self.wl.rows))
        agreement = greedy_agreement(self.lm, self.wl, n, self.opts.agreement_tokens)
        llama = {
            "llama.cpp_single_stream": _best_threads(
                measured,
                SINGLE_STREAM,
                "create_completion one sample at a time (section llama), best thread count",
                reason or "section llama not run",
            ),
            LLAMA_BATCHED: _best_threads(
                measured, f"{LLAMA_BATCHED}/", LLAMA_BATCH_HOW + "; best thread count", reason
            ),
        }
        value = section_peers(self.wl, measured, self.ours, agreement, llama)
        self.checkpoint("peers", value, load)

    def ours_runs(self) -> dict[str, Run]:
        """Our batched run; with the roofline on a CPU, followed in every round by the replay
        of its products (:data:`PRODUCTS`) over the batches it just ran."""
        last: dict[str, Measurement] = {}

        def ours(m: Measurement | None) -> Measurement:
            last["loop"] = run_batched(self.lm, self.wl, m=m)
            return last["loop"]

        def products(m: Measurement | None) -> Measurement:
            return run_products_only(self.lm, self.wl, last["loop"], m)

        if "roofline" not in self.sections or self.lm.device.type != "cpu":
            return {self.ours: ours}
        return {self.ours: ours, PRODUCTS: products}

    def roofline(self, measured: dict[str, Measurement]) -> None:
        """Section roofline over the side-by-side batched runs, or its own when none ran."""
        load = contention()
        dtypes = [self.ours] + [d for d in ("bfloat16", "float32") if d != self.ours]
        if self.ours not in measured:
            self.say("roofline: timing our batched run")
            runs = self.ours_runs()
            if self.lm.device.type == "cpu":
                runs[SUSTAINED] = run_sustained_matmul
            measured = interleaved(runs, self.opts.repeats)
        self.checkpoint("roofline", section_roofline(self.lm, measured, dtypes), load)


def _best_threads(
    measured: dict[str, Measurement], prefix: str, how: str, reason: str | None
) -> dict[str, Any]:
    """The fastest of the runs named ``prefix<threads>``, or why none ran."""
    runs = runs_by_threads(measured, prefix)
    if not runs:
        return {"skipped": reason or "not measured"}
    best = fastest(runs)
    return {
        **runs[best].to_dict(),
        "threads": best,
        "by_threads": {str(t): m.tokens_per_second for t, m in sorted(runs.items())},
        "how": how,
    }
