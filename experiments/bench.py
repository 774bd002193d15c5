"""``steer-eval bench`` (``make bench``): what the Phase 5 workload costs, measured side by side.

Every comparison runs in one process, on the same model, rows (prompt, seed, direction,
strength) and token counts, and reports the median over repeats; the machine and its load
average are recorded with the numbers, and ratios matter more than absolute times.

Sections (``--only``/``--skip`` pick them):

- ``batched``: steered generation of the default grid our way (``generate_batch``) against a
  plain loop of one Hugging Face ``model.generate`` call per sample with the hook applied by
  ``SteeringVector.apply`` (as the original research did). The per-sample loop is timed on a
  stratified subset (``--per-sample-limit``) and its tokens/s extrapolated. Ours one row at a
  time runs on the same subset, to separate batching from the implementation.
- ``dtype``: the batched timing in bf16 as well (interleaved with fp32), and the mean Δ per
  strength of the default grid under each with the same seeds, to judge bf16 on CPU.
- ``llama``: llama.cpp (llama-cpp-python) on the same GGUF, one stream at a time with a control
  vector at the same layer, and the agreement of its steering with our hook.
- ``tuning``: torch threads and batch size.
- ``scaling``: generation time against the number of concepts and ``max_new_tokens``.
- ``e2e``: the whole default ``make run`` workload with warm caches in a subprocess: wall time
  by stage and peak resident memory.

Targets (measured, never asserted): batched >= 10x per-sample, ours >= 3x llama.cpp
single-stream tokens/s, ``make run`` under 3 minutes warm, peak memory under 4 GB.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import datetime as dt
import json
import logging
import math
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from steering.generation import (
    Generation,
    GenerationRow,
    SamplingConfig,
    eos_ids,
    generate_batch,
)
from steering.models import LoadedModel
from steering.vector import SteeringVector

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DEFAULT_OUT = Path("bench/results.json")
DEFAULT_CONFIG = Path("configs/phase5.yaml")
SECTIONS = ("batched", "dtype", "llama", "tuning", "scaling", "e2e")
E2E_MARKER = "BENCH_E2E "

TARGETS = {
    "batched_vs_per_sample": ("batched / per-sample tokens/s", ">=", 10.0),
    "ours_vs_llama_cpp": ("ours / llama.cpp single-stream tokens/s", ">=", 3.0),
    "make_run_seconds": ("default make run, warm (s)", "<", 180.0),
    "peak_memory_gb": ("peak resident memory of make run (GB)", "<", 4.0),
}


# --------------------------------------------------------------------------- options


@dataclass
class BenchOptions:
    """What to measure and how often; ``quick`` shrinks everything to a smoke test."""

    config: Path = DEFAULT_CONFIG
    overrides: list[str] = field(default_factory=list)
    out: Path | None = DEFAULT_OUT
    sections: tuple[str, ...] = SECTIONS
    repeats: int = 3
    e2e_repeats: int = 1
    per_sample_limit: int = 15
    llama_limit: int = 30
    llama_threads: tuple[int, ...] = ()  # () = 1 and every core up to torch's thread count
    device: str | None = None
    dtype: str | None = None
    threads: int | None = None
    quick: bool = False
    scaling_concepts: tuple[int, ...] = (1, 10, 50)
    scaling_tokens: tuple[int, ...] = (25, 50, 100)
    tuning_tokens: int = 10
    tuning_threads: tuple[int, ...] = ()  # () = 1, torch's current count and every core
    tuning_batch_sizes: tuple[int, ...] = (16, 32)
    agreement_prompts: int = 6
    agreement_tokens: int = 8
    work_dir: Path | None = None  # warm classifiers; default <cache>/bench

    @classmethod
    def quick_defaults(cls, **kwargs: Any) -> BenchOptions:
        base = {
            "overrides": ["concepts.limit=2", "generation.max_new_tokens=8"],
            "repeats": 1,
            "per_sample_limit": 3,
            "llama_limit": 3,
            "quick": True,
            "scaling_concepts": (1, 2, 4),
            "scaling_tokens": (4, 8, 16),
            "tuning_tokens": 4,
            "tuning_batch_sizes": (2,),
            "agreement_prompts": 2,
            "agreement_tokens": 4,
        }
        extra = list(kwargs.pop("overrides", []) or [])
        base.update(kwargs)
        base["overrides"] = [*base["overrides"], *extra]
        return cls(**base)


# --------------------------------------------------------------------------- workload


@dataclass
class Workload:
    """The rows to generate, with everything needed to steer them either way."""

    rows: list[GenerationRow]
    directions: torch.Tensor  # [n_directions, hidden]; row.direction indexes it
    vectors: list[SteeringVector]  # vectors[row.direction]
    strengths: dict[str, float]  # row key -> strength s
    layer: int
    mode: str
    sampling: SamplingConfig
    batch_size: int
    seed: int = 0
    plan: Any = None  # the Phase 5 plan, when the rows come from one (scoring needs it)

    @property
    def n_concepts(self) -> int:
        return len({r.direction for r in self.rows})

    def with_tokens(self, max_new_tokens: int) -> Workload:
        return replace(self, sampling=replace(self.sampling, max_new_tokens=max_new_tokens))

    def describe(self) -> dict:
        return {
            "rows": len(self.rows),
            "concepts": self.n_concepts,
            "strengths": sorted(set(self.strengths.values())),
            "distinct_prompts": len({r.prompt for r in self.rows}),
            "layer": self.layer,
            "mode": self.mode,
            "max_new_tokens": self.sampling.max_new_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "greedy": self.sampling.greedy,
            "batch_size": self.batch_size,
        }


def workload_from_plan(plan) -> Workload:
    """The Phase 5 grid of a :class:`experiments.phase5.Plan`, exactly as ``make run`` runs it."""
    concepts = plan.graph.concepts
    vectors = [plan.vectors[c.synset] for c in concepts]
    g = plan.config.generation
    return Workload(
        rows=list(plan.rows),
        directions=torch.stack([v.direction for v in vectors]),
        vectors=vectors,
        strengths={k: float(m["strength"]) for k, m in plan.row_meta.items()},
        layer=plan.layer,
        mode=plan.config.steering.mode,
        sampling=SamplingConfig(g.max_new_tokens, g.temperature, g.top_p, g.greedy),
        batch_size=g.batch_size,
        seed=plan.config.seed,
        plan=plan,
    )


def synthetic_workload(
    lm: LoadedModel,
    n_concepts: int = 2,
    prompts: Sequence[str] = ("Tell me about something.", "Here is a story:"),
    strengths: Sequence[float] = (-1.0, 0.0, 1.0),
    max_new_tokens: int = 8,
    batch_size: int = 96,
    layer: int | None = None,
    alpha: float = 1.0,
    beta: float = 0.2,
    seed: int = 0,
) -> Workload:
    """Random unit directions on the same grid layout (tests; cost does not depend on v)."""
    from experiments.phase5 import row_key, row_seed

    layer = lm.check_layer(lm.default_layer if layer is None else layer)
    gen = torch.Generator().manual_seed(seed)
    vectors = [
        SteeringVector.from_direction(
            torch.randn(lm.hidden_size, generator=gen), layer, alpha=alpha, beta=beta
        )
        for _ in range(n_concepts)
    ]
    rows, by_key = [], {}
    for c, vector in enumerate(vectors):
        for p, prompt in enumerate(prompts):
            row_s = row_seed(seed, f"concept{c}", p, 0)
            for s in strengths:
                key = row_key(f"concept{c}", p, 0, s)
                rows.append(GenerationRow(key, prompt, row_s, c, float(vector.coefficients(s)[0])))
                by_key[key] = float(s)
    return Workload(
        rows=rows,
        directions=torch.stack([v.direction for v in vectors]),
        vectors=vectors,
        strengths=by_key,
        layer=layer,
        mode="additive",
        sampling=SamplingConfig(max_new_tokens=max_new_tokens),
        batch_size=batch_size,
        seed=seed,
    )


def scaled_workload(wl: Workload, n_concepts: int) -> tuple[Workload, str]:
    """The grid with ``n_concepts`` concepts: a prefix of the real ones, or, beyond them,
    the real concepts repeated with distinct seeds (more samples per prompt). Generation
    cost does not depend on which direction a row carries, only on rows x tokens."""
    from experiments.phase5 import row_seed

    real = sorted({r.direction for r in wl.rows})
    if n_concepts <= len(real):
        keep = set(real[:n_concepts])
        rows = [r for r in wl.rows if r.direction in keep]
        return replace(wl, rows=rows), f"the first {n_concepts} of the {len(real)} concepts"
    copies = math.ceil(n_concepts / len(real))
    rows, strengths = list(wl.rows), dict(wl.strengths)
    for k in range(1, copies):
        for r in wl.rows:
            if k * len(real) + real.index(r.direction) >= n_concepts:
                continue
            key = f"{r.key}|copy{k}"
            rows.append(replace(r, key=key, seed=row_seed(r.seed, "copy", k, 0)))
            strengths[key] = wl.strengths[r.key]
    how = (
        f"{len(real)} real concepts repeated {copies}x with distinct seeds "
        f"(samples_per_prompt={copies})"
    )
    return replace(wl, rows=rows, strengths=strengths), how


def stratified_subset(wl: Workload, n: int, seed: int = 0) -> list[GenerationRow]:
    """``n`` rows spread over the strengths (round-robin) and, at random, over concepts and
    prompts, in a fixed order."""
    groups: dict[float, list[GenerationRow]] = {}
    for r in wl.rows:
        groups.setdefault(wl.strengths[r.key], []).append(r)
    rng = random.Random(seed)
    shuffled = [rng.sample(g, len(g)) for _, g in sorted(groups.items())]
    picked: list[GenerationRow] = []
    for i in range(max(len(g) for g in shuffled)):
        for g in shuffled:
            if i < len(g) and len(picked) < n:
                picked.append(g[i])
    return picked


# --------------------------------------------------------------------------- measurements


def median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


@dataclass
class Measurement:
    """Wall seconds and generated tokens per repeat; medians over the repeats."""

    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    rows: int = 0
    extra: dict = field(default_factory=dict)
    generations: list[Generation] | None = None  # the last repeat's (not serialised)

    def add(self, seconds: float, tokens: int) -> None:
        self.seconds.append(float(seconds))
        self.tokens.append(int(tokens))

    @property
    def median_seconds(self) -> float | None:
        return median(self.seconds)

    @property
    def tokens_per_second(self) -> float | None:
        """The median of the per-repeat rates (not total tokens over total time)."""
        return median([t / s for t, s in zip(self.tokens, self.seconds, strict=True) if s > 0])

    def to_dict(self) -> dict:
        return {
            "rows": self.rows,
            "repeats": len(self.seconds),
            "seconds": [round(s, 6) for s in self.seconds],
            "tokens": self.tokens,
            "median_seconds": _round(self.median_seconds),
            "tokens_per_second": _round(self.tokens_per_second),
            **self.extra,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def sync(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def gpu_peak(device: torch.device, extra: dict) -> Iterator[None]:
    """Peak GPU memory allocated inside the block (CUDA only) into ``extra``."""
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.cuda.reset_peak_memory_stats(device)
    yield
    if on_cuda:
        extra["gpu_peak_bytes"] = max(
            extra.get("gpu_peak_bytes", 0), int(torch.cuda.max_memory_allocated(device))
        )


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (as ``uptime`` prints them)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on Linux
        return None


def cpu_pressure() -> float | None:
    """Linux PSI: the share of the last 60 s in which some runnable task waited for a CPU."""
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(dict(kv.split("=") for kv in first.split()[1:])["avg60"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def contention() -> dict:
    return {"load_average": load_average(), "cpu_pressure_avg60": cpu_pressure()}


def batches_of(
    lm: LoadedModel, rows: Sequence[GenerationRow], size: int
) -> list[list[GenerationRow]]:
    """Rows sorted by prompt length, as ``make run`` batches them."""
    from experiments.phase5 import _batches

    return _batches(list(rows), lm, size)


def run_batched(
    lm: LoadedModel,
    wl: Workload,
    rows: Sequence[GenerationRow] | None = None,
    batch_size: int | None = None,
    m: Measurement | None = None,
) -> Measurement:
    """One timed pass of our batched generation over ``rows`` (default: all); appends a repeat."""
    rows = list(wl.rows if rows is None else rows)
    m = m or Measurement(rows=len(rows))
    batches = batches_of(lm, rows, batch_size or wl.batch_size)
    gens: list[Generation] = []
    tokens = 0
    with gpu_peak(lm.device, m.extra):
        sync(lm.device)
        start = time.perf_counter()
        for batch in batches:
            out, stats = generate_batch(lm, batch, wl.directions, wl.layer, wl.mode, wl.sampling)
            gens.extend(out)
            tokens += stats.new_tokens
        sync(lm.device)
        m.add(time.perf_counter() - start, tokens)
    m.generations = gens
    return m


def hf_generate_one(lm: LoadedModel, wl: Workload, row: GenerationRow) -> tuple[str, int]:
    """The original research's way: one ``model.generate`` per sample, hook via ``apply``."""
    tok = lm.tokenizer
    enc = tok(row.prompt, return_tensors="pt").to(lm.device)
    torch.manual_seed(row.seed)
    s = wl.sampling
    kwargs: dict = {"max_new_tokens": s.max_new_tokens, "pad_token_id": tok.pad_token_id}
    if s.greedy:
        kwargs["do_sample"] = False
    else:
        kwargs.update(do_sample=True, top_p=s.top_p, temperature=s.temperature)
    with wl.vectors[row.direction].apply(lm, wl.strengths[row.key]):
        out = lm.model.generate(**enc, **kwargs)
    new = out[0, enc["input_ids"].shape[1] :].tolist()
    eos = set(eos_ids(lm))
    if new and new[-1] in eos:  # ours does not count the EOS token either
        new = new[:-1]
    return tok.decode(new, skip_special_tokens=True), len(new)


def run_per_sample(lm: LoadedModel, wl: Workload, rows: Sequence[GenerationRow]) -> Measurement:
    """The per-sample loop over ``rows``, timed as one repeat."""
    m = Measurement(rows=len(rows))
    tokens = 0
    with gpu_peak(lm.device, m.extra):
        sync(lm.device)
        start = time.perf_counter()
        for row in rows:
            tokens += hf_generate_one(lm, wl, row)[1]
        sync(lm.device)
        m.add(time.perf_counter() - start, tokens)
    return m


def interleaved(
    runs: dict[str, Callable[[Measurement | None], Measurement]], repeats: int
) -> dict[str, Measurement]:
    """Repeat each run in turn (A B A B ...), so load that drifts hits every variant alike."""
    out: dict[str, Measurement | None] = dict.fromkeys(runs)
    for _ in range(repeats):
        for name, fn in runs.items():
            out[name] = fn(out[name])
    return {k: v for k, v in out.items() if v is not None}


@dataclass
class Stream:
    """A one-sample-at-a-time baseline, timed in chunks between the batched repeats."""

    rows: list[GenerationRow]
    run: Callable[[Sequence[GenerationRow]], Measurement]


def contiguous_chunks(rows: Sequence[GenerationRow], k: int) -> list[list[GenerationRow]]:
    """``k`` consecutive slices (of a stratified subset, so each mixes the strengths)."""
    n = len(rows)
    return [list(rows[i * n // k : (i + 1) * n // k]) for i in range(k)]


def measure_side_by_side(
    batched: dict[str, Callable[[Measurement | None], Measurement]],
    streams: dict[str, Stream],
    repeats: int,
    say: Callable[[str], None] = lambda _m: None,
) -> dict[str, Measurement]:
    """Each repeat runs every batched variant over the whole grid, then one chunk of every
    single-stream baseline: load that drifts during the run hits all of them alike. A
    baseline's repeats are its chunks (its tokens/s is the median over chunks)."""
    splits = {name: contiguous_chunks(st.rows, repeats) for name, st in streams.items()}
    out: dict[str, Measurement] = {}
    for r in range(repeats):
        for name, fn in batched.items():
            say(f"repeat {r + 1}/{repeats}: {name} batched")
            out[name] = fn(out.get(name))
        for name, st in streams.items():
            part = splits[name][r]
            if not part:
                continue
            say(f"repeat {r + 1}/{repeats}: {name}, {len(part)} samples")
            m = st.run(part)
            total = out.setdefault(name, Measurement(rows=len(st.rows)))
            total.add(m.seconds[0], m.tokens[0])
            for key, value in m.extra.items():
                if key == "gpu_peak_bytes":
                    total.extra[key] = max(total.extra.get(key, 0), value)
    return out


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def warm_up(lm: LoadedModel, wl: Workload) -> None:
    """One-off costs (kernel selection, first allocations) kept out of every timing."""
    few = wl.rows[: min(4, len(wl.rows))]
    generate_batch(
        lm, few, wl.directions, wl.layer, wl.mode, replace(wl.sampling, max_new_tokens=2)
    )
    hf_generate_one(lm, wl.with_tokens(2), few[0])


def other_precision(lm: LoadedModel, spec: str | None) -> tuple[LoadedModel, str]:
    """The model in the other dtype: bf16 when ``lm`` is fp32, else fp32 (reloaded)."""
    from steering.models import load_model, wrap_model

    if lm.dtype == torch.float32:
        model = copy.deepcopy(lm.model).to(torch.bfloat16)
        info = {**lm.info, "cast_from": "float32"}
        return wrap_model(model, lm.tokenizer, lm.model_id, info), "bfloat16"
    if spec is not None:
        return load_model(spec, device=str(lm.device), dtype="float32"), "float32"
    model = copy.deepcopy(lm.model).float()
    return wrap_model(model, lm.tokenizer, lm.model_id, dict(lm.info)), "float32"


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# --------------------------------------------------------------------------- (a) + dtype


def section_batched(
    wl: Workload, measured: dict[str, Measurement], ours: str, subset: Sequence[GenerationRow]
) -> dict:
    """(a): batched (and the other dtype) against the per-sample HF loop, same rows."""
    batched = measured[ours]
    per_sample = measured["per_sample"]
    single = measured["one_row_at_a_time"]
    extrapolated = len(subset) < len(wl.rows)
    scale = len(wl.rows) / max(1, len(subset))
    per_sample.extra.update(
        {
            "timed_samples": len(subset),
            "of_samples": len(wl.rows),
            "extrapolated": extrapolated,
            "estimated_seconds_all_samples": _round(sum(per_sample.seconds) * scale, 2),
            "how": "a loop of model.generate(do_sample=True, top_p, temperature, "
            "max_new_tokens) per sample, steered with SteeringVector.apply(lm, strength); "
            f"{len(subset)} stratified samples in {len(per_sample.seconds)} chunks, one between "
            "each pair of batched repeats; tokens/s is the median over chunks"
            + (" and is extrapolated to all samples" if extrapolated else ""),
        }
    )
    single.extra.update({"timed_samples": len(subset), "batch_size": 1})
    result = {
        "workload": wl.describe(),
        "dtype": ours,
        "batched": batched.to_dict(),
        "per_sample": per_sample.to_dict(),
        "ours_one_row_at_a_time": single.to_dict(),
        "ratio_batched_vs_per_sample": _round(
            ratio(batched.tokens_per_second, per_sample.tokens_per_second), 3
        ),
        "ratio_one_row_at_a_time_vs_per_sample": _round(
            ratio(single.tokens_per_second, per_sample.tokens_per_second), 3
        ),
    }
    for name in (n for n in measured if n not in (ours, "per_sample", "one_row_at_a_time")):
        if name.startswith("llama.cpp"):
            continue
        # the same rows in the other dtype, against the same loop
        result[f"ratio_batched_{name}_vs_per_sample_{ours}"] = _round(
            ratio(measured[name].tokens_per_second, per_sample.tokens_per_second), 3
        )
    return result


def delta_by_strength(plan, gens: Sequence[Generation], embedder) -> dict[str, dict[str, float]]:
    """Δ per row (key -> Δ) and strength, scored exactly as Phase 5 scores it."""
    from experiments.phase5 import score_generations

    records = score_generations(plan, list(gens), [None] * len(gens), embedder)
    return {r["key"]: {"delta": r["delta"], "strength": r["strength"]} for r in records}


def compare_deltas(base: dict, other: dict) -> dict:
    """Per strength: mean Δ under each dtype and their paired difference with its SE."""
    out: dict[str, dict] = {}
    strengths = sorted({v["strength"] for v in base.values()})
    zero = {k: v["delta"] for k, v in base.items() if v["strength"] == 0.0}
    zero_other = {k: v["delta"] for k, v in other.items() if v["strength"] == 0.0}
    for s in strengths:
        keys = sorted(k for k, v in base.items() if v["strength"] == s and k in other)
        a = [base[k]["delta"] for k in keys]
        b = [other[k]["delta"] for k in keys]
        diff = [y - x for x, y in zip(a, b, strict=True)]
        n = len(keys)
        se = statistics.stdev(diff) / math.sqrt(n) if n > 1 else None
        se_a = statistics.stdev(a) / math.sqrt(n) if n > 1 else None
        entry = {
            "n": n,
            "mean_delta_base": _round(statistics.fmean(a)) if a else None,
            "mean_delta_other": _round(statistics.fmean(b)) if b else None,
            "se_mean_delta_base": _round(se_a),
            "mean_difference": _round(statistics.fmean(diff)) if diff else None,
            "se_difference": _round(se),
            "within_2se": None
            if se is None
            else bool(abs(statistics.fmean(diff)) <= 2 * se + 1e-12),
        }
        if s != 0.0:  # the steering effect Δ_s - Δ_0, paired by (concept, prompt, sample)
            eff_a, eff_b = [], []
            for k in keys:
                k0 = _zero_key(k)
                if k0 in zero and k0 in zero_other:
                    eff_a.append(base[k]["delta"] - zero[k0])
                    eff_b.append(other[k]["delta"] - zero_other[k0])
            if eff_a:
                shift_diff = [y - x for x, y in zip(eff_a, eff_b, strict=True)]
                se_shift = (
                    statistics.stdev(shift_diff) / math.sqrt(len(shift_diff))
                    if len(shift_diff) > 1
                    else None
                )
                entry["mean_shift_base"] = _round(statistics.fmean(eff_a))
                entry["mean_shift_other"] = _round(statistics.fmean(eff_b))
                entry["mean_shift_difference"] = _round(statistics.fmean(shift_diff))
                entry["se_shift_difference"] = _round(se_shift)
                entry["shift_within_2se"] = (
                    None
                    if se_shift is None
                    else bool(abs(statistics.fmean(shift_diff)) <= 2 * se_shift + 1e-12)
                )
        out[f"{s:+g}"] = entry
    return out


def _zero_key(key: str) -> str:
    """The strength-0 row of a row key ``synset|p0|n0|s+1.000``."""
    head, _, _ = key.rpartition("|s")
    return f"{head}|s{0.0:+.3f}"


def section_dtype(
    base_lm: LoadedModel,
    other: LoadedModel,
    wl: Workload,
    measured: dict[str, Measurement],
    embedder,
) -> dict:
    base, alt = dtype_name(base_lm.dtype), dtype_name(other.dtype)
    m_base, m_alt = measured[base], measured[alt]
    result: dict = {
        "base": base,
        "other": alt,
        "how": "the same rows and seeds, timed interleaved with the batched run; the other "
        "dtype is a cast copy of the same weights",
        "generation": {base: m_base.to_dict(), alt: m_alt.to_dict()},
        "speedup_other_vs_base": _round(
            ratio(m_alt.tokens_per_second, m_base.tokens_per_second), 3
        ),
    }
    if m_base.generations and m_alt.generations:
        same = sum(
            a.token_ids == b.token_ids
            for a, b in zip(m_base.generations, m_alt.generations, strict=True)
        )
        result["identical_generations"] = f"{same}/{len(m_base.generations)}"
    if wl.plan is not None and embedder is not None:
        from experiments.phase5 import _neutral_texts
        from steering.activations import residual_scale

        d_base = delta_by_strength(wl.plan, m_base.generations or [], embedder)
        d_alt = delta_by_strength(wl.plan, m_alt.generations or [], embedder)
        per = compare_deltas(d_base, d_alt)
        result["delta_per_strength"] = per
        result["delta_same_within_2se"] = all(
            v["within_2se"] is not False and v.get("shift_within_2se") is not False
            for v in per.values()
        )
        result["alpha"] = {
            base: _round(wl.plan.alpha, 2),
            alt: _round(
                residual_scale(other, _neutral_texts(wl.plan.graph, wl.plan.config.seed), wl.layer),
                2,
            ),
        }
        result["note"] = (
            "vectors, α and centroids come from the fp32 plan; the difference is paired by "
            "row (same seed, same uniforms), SE over rows"
        )
    return result


# --------------------------------------------------------------------------- (b) llama.cpp


def llama_layer_index(layer: int) -> int:
    """llama.cpp adds control vector il to the *output* of decoder layer il (0-based, after
    the residual add; ``build_cvec(cur, il)`` at the end of each layer), which is what our
    hook on ``lm.layer(layer)`` edits: il = layer. Its buffer holds one n_embd row per
    layer starting at layer 1 (layer 0 cannot be steered), so il's row is at
    ``(il - 1) * n_embd``."""
    if layer < 1:
        raise ValueError("llama.cpp control vectors cannot steer decoder layer 0")
    return layer


def set_control_vector(
    llm, direction: torch.Tensor | None, coefficient: float, il: int, n_layers: int
) -> None:
    """Add ``coefficient * direction`` to layer il's output (None or 0 clears the vector)."""
    import llama_cpp
    import numpy as np

    if direction is None or coefficient == 0.0:
        rc = llama_cpp.llama_set_adapter_cvec(llm.ctx, None, 0, llm.n_embd(), -1, -1)
    else:
        n_embd = llm.n_embd()
        buf = np.zeros(n_layers * n_embd, dtype=np.float32)
        buf[(il - 1) * n_embd : il * n_embd] = coefficient * direction.float().numpy()
        rc = llama_cpp.llama_set_adapter_cvec(
            llm.ctx, buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), buf.size, n_embd, il, il
        )
    if rc != 0:
        raise RuntimeError(f"llama_set_adapter_cvec failed with {rc}")


def open_llama(gguf: Path, threads: int, logits_all: bool = False, gpu: bool = False):
    from llama_cpp import Llama

    return Llama(
        model_path=str(gguf),
        n_ctx=512,
        n_threads=threads,
        n_threads_batch=threads,
        n_gpu_layers=-1 if gpu else 0,
        logits_all=logits_all,
        seed=0,
        verbose=False,
    )


def run_llama(llm, wl: Workload, rows: Sequence[GenerationRow], n_layers: int) -> Measurement:
    """One stream at a time, as a llama.cpp user runs it: a fresh context per sample."""
    il = llama_layer_index(wl.layer)
    s = wl.sampling
    m = Measurement(rows=len(rows))
    total, tokens = 0.0, 0
    for row in rows:
        vector = wl.vectors[row.direction]
        coefficient = float(vector.coefficients(wl.strengths[row.key])[0])
        start = time.perf_counter()
        set_control_vector(llm, vector.direction, coefficient, il, n_layers)
        llm.reset()
        out = llm.create_completion(
            row.prompt,
            max_tokens=s.max_new_tokens,
            temperature=0.0 if s.greedy else s.temperature,
            top_p=s.top_p,
            top_k=0,
            min_p=0.0,
            typical_p=1.0,
            repeat_penalty=1.0,
            seed=row.seed % (2**31),
        )
        total += time.perf_counter() - start
        tokens += int(out["usage"]["completion_tokens"])
    set_control_vector(llm, None, 0.0, il, n_layers)
    m.add(total, tokens)
    return m


@torch.inference_mode()
def steering_agreement(
    lm: LoadedModel, llm, wl: Workload, n_prompts: int, n_tokens: int, n_layers: int
) -> dict:
    """Greedy top-1 agreement between our hook and llama.cpp's control vector.

    For each prompt (one per concept and generation prompt) and strength, our greedy
    continuation of ``n_tokens`` is fed to both models (teacher forcing, the same token ids)
    and the argmax at each continuation position compared; the first position is the plain
    greedy next token. At a nonzero strength the layer below and above is tried too: the
    right mapping is the one that agrees best.
    """
    import numpy as np

    tok = lm.tokenizer
    il = llama_layer_index(wl.layer)
    cases = []
    seen = set()
    for r in wl.rows:
        if (r.prompt, r.direction) not in seen:
            seen.add((r.prompt, r.direction))
            cases.append(r)
    cases = cases[:n_prompts]
    strengths = sorted(set(wl.strengths.values()))
    moderate = min((s for s in strengths if s != 0.0), key=abs, default=None)
    layer_options = [il] + [x for x in (il - 1, il + 1) if 1 <= x < n_layers]
    results: dict[str, dict] = {}
    for s in strengths:
        for cand in layer_options if s == moderate else [il]:
            first, pos_agree, pos_total = 0, 0, 0
            for row in cases:
                vector = wl.vectors[row.direction]
                coefficient = float(vector.coefficients(s)[0])
                greedy = replace(wl.sampling, greedy=True, max_new_tokens=n_tokens)
                steer_row = replace(row, coefficient=coefficient)
                gens, _ = generate_batch(lm, [steer_row], wl.directions, wl.layer, wl.mode, greedy)
                prompt_ids = tok(row.prompt)["input_ids"]
                seq = prompt_ids + gens[0].token_ids
                first_pos = len(prompt_ids) - 1  # the position predicting the first new token
                with vector.apply(lm, s):
                    logits = lm.model(input_ids=torch.tensor([seq], device=lm.device)).logits
                ours = logits[0, first_pos:].argmax(-1).cpu()
                set_control_vector(llm, vector.direction, coefficient, cand, n_layers)
                llm.reset()
                llm.eval(seq)
                theirs = np.asarray(llm.scores[first_pos : len(seq)])
                theirs = torch.from_numpy(theirs.argmax(-1))
                agree = (ours == theirs).tolist()
                first += int(agree[0])
                pos_agree += sum(agree)
                pos_total += len(agree)
            key = f"s={s:+g}" + ("" if cand == il else f" il={cand}")
            results[key] = {
                "strength": s,
                "llama_il": cand,
                "next_token_agreement": f"{first}/{len(cases)}",
                "teacher_forced_agreement": _round(pos_agree / max(1, pos_total), 3),
                "positions": pos_total,
            }
    set_control_vector(llm, None, 0.0, il, n_layers)
    return {
        "prompts": len(cases),
        "tokens": n_tokens,
        "moderate_strength": moderate,
        "our_layer": wl.layer,
        "llama_il": il,
        "by_strength": results,
    }


def llama_threads(opts: BenchOptions) -> tuple[int, ...]:
    return opts.llama_threads or tuple(sorted({1, max(1, torch.get_num_threads())}))


def open_llamas(
    lm: LoadedModel, gguf: Path, opts: BenchOptions, wl: Workload
) -> tuple[dict[int, Any], bool]:
    """One llama.cpp context per thread setting, warmed up."""
    import llama_cpp

    gpu = lm.device.type == "cuda" and bool(llama_cpp.llama_supports_gpu_offload())
    llamas = {}
    for t in llama_threads(opts):
        llm = open_llama(gguf, t, gpu=gpu)
        if int(llama_cpp.llama_model_n_layer(llm.model)) != lm.n_layers:
            raise RuntimeError("the GGUF and the torch model have different layer counts")
        run_llama(llm, wl.with_tokens(2), wl.rows[:1], lm.n_layers)  # warm-up
        llamas[t] = llm
    return llamas, gpu


def section_llama(
    lm: LoadedModel,
    wl: Workload,
    opts: BenchOptions,
    gguf: Path,
    measured: dict[str, Measurement],
    ours: str,
    subset: Sequence[GenerationRow],
    gpu: bool,
    say: Callable[[str], None] = lambda _m: None,
) -> dict:
    """(b): our batched tokens/s against llama.cpp's single stream, and steering agreement."""
    import llama_cpp

    by_threads = {
        int(k.split("/")[1]): m for k, m in measured.items() if k.startswith("llama.cpp/")
    }
    best_t = max(by_threads, key=lambda t: by_threads[t].tokens_per_second or 0.0)
    best = by_threads[best_t]
    say("steering agreement between our hook and the llama.cpp control vector")
    llm = open_llama(gguf, best_t, logits_all=True, gpu=gpu)
    agreement = steering_agreement(
        lm, llm, wl, opts.agreement_prompts, opts.agreement_tokens, lm.n_layers
    )
    _close(llm)
    mine = measured[ours]
    return {
        "gguf": gguf.name,
        "llama_cpp_version": getattr(llama_cpp, "__version__", "unknown"),
        "gpu_offload": gpu,
        "how": "llama-cpp-python create_completion one sample at a time (fresh KV per sample), "
        f"temperature {wl.sampling.temperature}, top_p {wl.sampling.top_p}, top_k off, "
        f"min_p off, repeat penalty off, {wl.sampling.max_new_tokens} tokens; control vector "
        f"set per sample with llama_set_adapter_cvec at il={llama_layer_index(wl.layer)} "
        f"(= our layer {wl.layer}); {len(subset)} stratified samples in chunks interleaved "
        "with our batched repeats; the best thread count is compared",
        "layer_mapping": "our layer L = output of decoder layer L (0-based) = llama.cpp il=L; "
        "the cvec buffer starts at layer 1, so layer L's row is at offset (L-1)*n_embd",
        "timed_samples": len(subset),
        "by_threads": {str(t): m.to_dict() for t, m in sorted(by_threads.items())},
        "best_threads": best_t,
        "llama_cpp": best.to_dict(),
        "ours_batched_tokens_per_second": _round(mine.tokens_per_second),
        "ratio_ours_vs_llama_cpp": _round(ratio(mine.tokens_per_second, best.tokens_per_second), 3),
        **{
            f"ratio_ours_{name}_vs_llama_cpp": _round(
                ratio(m.tokens_per_second, best.tokens_per_second), 3
            )
            for name, m in measured.items()
            if name not in (ours, "per_sample", "one_row_at_a_time")
            and not name.startswith("llama.cpp")
        },
        "agreement": agreement,
    }


def _close(llm) -> None:
    if hasattr(llm, "close"):
        llm.close()


# --------------------------------------------------------------------------- tuning, scaling


def section_tuning(
    lm: LoadedModel, wl: Workload, opts: BenchOptions, say: Callable[[str], None]
) -> dict:
    short = wl.with_tokens(min(opts.tuning_tokens, wl.sampling.max_new_tokens))
    cores = os.cpu_count() or 1
    current = torch.get_num_threads()
    thread_options = sorted(set(opts.tuning_threads) or {1, current, cores})
    runs: dict[str, Callable[[Measurement | None], Measurement]] = {}
    for t in thread_options:

        def by_threads(m, t=t):
            with torch_threads(t):
                return run_batched(lm, short, m=m)

        runs[f"threads={t}"] = by_threads
    sizes = sorted({b for b in opts.tuning_batch_sizes if b < len(wl.rows)} | {wl.batch_size})
    for b in sizes:
        if b == wl.batch_size:
            continue  # the threads={current} run already is the configured batch size
        runs[f"batch_size={b}"] = lambda m, b=b: run_batched(lm, short, batch_size=b, m=m)
    say(f"tuning: {', '.join(runs)} at {short.sampling.max_new_tokens} tokens")
    measured = interleaved(runs, opts.repeats)
    out = {k: v.to_dict() for k, v in measured.items()}
    best = max(measured, key=lambda k: measured[k].tokens_per_second or 0.0)
    return {
        "max_new_tokens": short.sampling.max_new_tokens,
        "rows": len(wl.rows),
        "configured": {"threads": current, "batch_size": wl.batch_size},
        "runs": out,
        "best": best,
    }


def section_scaling(
    lm: LoadedModel,
    wl: Workload,
    opts: BenchOptions,
    base: Measurement | None,
    say: Callable[[str], None],
) -> dict:
    """Generation time only, against concepts and max_new_tokens (1 repeat past the default)."""
    default_work = len(wl.rows) * wl.sampling.max_new_tokens

    def measure(w: Workload) -> tuple[Measurement, bool]:
        if (
            base is not None
            and len(w.rows) == len(wl.rows)
            and w.sampling.max_new_tokens == wl.sampling.max_new_tokens
        ):
            return base, True
        reps = opts.repeats if len(w.rows) * w.sampling.max_new_tokens <= default_work else 1
        m = None
        for _ in range(reps):
            m = run_batched(lm, w, m=m)
        assert m is not None
        return m, False

    concepts = {}
    for n in opts.scaling_concepts:
        w, how = scaled_workload(wl, n)
        say(f"scaling: {n} concepts ({len(w.rows)} rows)")
        m, reused = measure(w)
        concepts[str(n)] = {**_scaling_entry(m, w), "how": how, "reused_batched": reused}
    tokens = {}
    for t in opts.scaling_tokens:
        w = wl.with_tokens(t)
        say(f"scaling: {t} new tokens")
        m, reused = measure(w)
        tokens[str(t)] = {**_scaling_entry(m, w), "reused_batched": reused}
    return {
        "stage": "generation only (generate_batch over the grid, batched as make run does)",
        "repeats_rule": "--repeats up to the default grid's rows x tokens, 1 beyond it",
        "concepts": concepts,
        "max_new_tokens": tokens,
    }


def _scaling_entry(m: Measurement, w: Workload) -> dict:
    secs = m.median_seconds or 0.0
    return {
        "rows": len(w.rows),
        "max_new_tokens": w.sampling.max_new_tokens,
        "median_seconds": _round(secs, 3),
        "tokens": m.tokens[-1] if m.tokens else 0,
        "tokens_per_second": _round(m.tokens_per_second, 2),
        "seconds_per_row": _round(secs / max(1, len(w.rows)), 4),
        "repeats": len(m.seconds),
    }


# --------------------------------------------------------------------------- (c) + (d) e2e


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


def run_e2e_child(spec: dict) -> dict:
    """Inside the subprocess: the default ``make run`` workload, in-process, timed."""
    memory = PeakMemory()
    t0 = time.perf_counter()
    from experiments.config import load_config
    from experiments.phase5 import run_phase5

    import_seconds = time.perf_counter() - t0
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    config = load_config(spec["config"], spec["overrides"])

    def progress(message: str) -> None:
        memory.enter("generation, perplexity, scoring" if message.startswith("run ") else message)

    start = time.perf_counter()
    result = run_phase5(config, progress=progress)
    run_seconds = time.perf_counter() - start
    peak, by_phase = memory.finish()
    out = {
        "import_seconds": import_seconds,
        "run_seconds": run_seconds,
        "timings": result.timings,
        "tokens_per_second": result.tokens_per_second,
        "n_generations": len(result.records),
        "peak_rss_bytes": peak,
        "peak_rss_by_phase_bytes": by_phase,
        "peak_per_phase_exact": memory.resettable,
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch_threads": torch.get_num_threads(),
    }
    if torch.cuda.is_available() and config.device != "cpu":
        out["gpu_peak_bytes"] = int(torch.cuda.max_memory_allocated())
    return out


def section_e2e(
    opts: BenchOptions, overrides: list[str], store: Path, say: Callable[[str], None]
) -> dict:
    """(c) wall time by stage and (d) peak memory of ``make run``, in a fresh subprocess."""
    runs = []
    for i in range(opts.e2e_repeats):
        spec = {
            "config": str(opts.config),
            "overrides": [*overrides, f"tracking.results_dir={store / 'results'}"],
            "threads": opts.threads,
        }
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": f"sqlite:///{store / 'mlruns.db'}",
            "MLFLOW_ARTIFACT_ROOT": str(store / "mlartifacts"),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        say(f"end to end: make run's workload in a subprocess ({i + 1}/{opts.e2e_repeats})")
        load = contention()
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "experiments.bench", "_e2e", json.dumps(spec)],
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
        child = json.loads(lines[-1][len(E2E_MARKER) :])
        child["process_wall_seconds"] = wall
        child["load_average_before"] = load
        runs.append(child)
    walls = [r["process_wall_seconds"] for r in runs]
    pick = runs[walls.index(sorted(walls)[(len(walls) - 1) // 2])]  # the median run
    stages = {k: round(v, 3) for k, v in pick["timings"].items()}
    accounted = sum(stages.values())
    return {
        "how": "python -m experiments.bench _e2e: load_config + run_phase5 in a fresh process "
        "(model and embedder loads included), warm classifiers, temporary MLflow store",
        "repeats": len(runs),
        "process_wall_seconds": [round(w, 2) for w in walls],
        "median_process_wall_seconds": round(statistics.median(walls), 2),
        "run_phase5_seconds": round(pick["run_seconds"], 2),
        "import_seconds": round(pick["import_seconds"], 2),
        "stages_seconds": stages,
        "unaccounted_seconds": round(pick["run_seconds"] - accounted, 2),
        "generation_tokens_per_second": _round(pick["tokens_per_second"], 2),
        "n_generations": pick["n_generations"],
        "peak_rss_bytes": pick["peak_rss_bytes"],
        "peak_rss_gb": round(pick["peak_rss_bytes"] / 1e9, 3),
        "peak_rss_by_phase_gb": {
            k: round(v / 1e9, 3) for k, v in pick["peak_rss_by_phase_bytes"].items()
        },
        "peak_memory_how": "VmHWM of the run's own process, reset at each phase boundary "
        "(ru_maxrss of a vfork'd child includes the parent's peak on Linux)",
        "gpu_peak_bytes": pick.get("gpu_peak_bytes"),
        "torch_threads": pick["torch_threads"],
        "runs": runs,
    }


# --------------------------------------------------------------------------- machine, targets


def machine_info(device: torch.device) -> dict:
    from importlib import metadata

    info: dict = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
    }
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        for line in cpuinfo.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next((x for x in cpuinfo.splitlines() if x.startswith("flags")), "").split()
        info["cpu_bf16"] = [f for f in ("avx512_bf16", "amx_bf16", "avx512f") if f in flags]
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
        info["memory_gb"] = round(int(mem) * 1024 / 1e9, 1)
    except (OSError, StopIteration, IndexError, ValueError):  # pragma: no cover
        pass
    for pkg in ("torch", "transformers", "llama-cpp-python"):
        try:
            info[f"version.{pkg}"] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[f"version.{pkg}"] = None
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def evaluate_targets(sections: dict) -> list[dict]:
    def get(*path: str) -> Any:
        node: Any = sections
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return None
            node = node[p]
        return node

    values = {
        "batched_vs_per_sample": get("batched", "ratio_batched_vs_per_sample"),
        "ours_vs_llama_cpp": get("llama", "ratio_ours_vs_llama_cpp"),
        "make_run_seconds": get("e2e", "median_process_wall_seconds"),
        "peak_memory_gb": get("e2e", "peak_rss_gb"),
    }
    out = []
    for key, (label, op, threshold) in TARGETS.items():
        value = values[key]
        met = None if value is None else (value >= threshold if op == ">=" else value < threshold)
        out.append(
            {
                "key": key,
                "label": label,
                "target": f"{op} {threshold:g}",
                "value": value,
                "met": met,
            }
        )
    return out


# --------------------------------------------------------------------------- driver


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
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str) + "\n")
    tmp.replace(out)


def run_bench(
    opts: BenchOptions,
    lm: LoadedModel | None = None,
    workload: Workload | None = None,
    embedder=None,
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
        work = opts.work_dir or _default_work_dir()
        classifier_dir = str((work / "classifiers").resolve())
        overrides.append(f"classifier.dir={classifier_dir}")
        config = load_config(opts.config, overrides)
        results: dict = {
            "schema": SCHEMA_VERSION,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "complete": False,
            "argv": sys.argv[1:],
            "options": _options_dict(opts),
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
            workload = _plan_workload(config, lm, embedder)
        wl = workload
        results["workload"] = wl.describe()
        warm_up(lm, wl)
        sec = results["sections"]

        def checkpoint(name: str, value: dict, load_before: list[float] | None) -> None:
            value["load_average"] = {"before": load_before, "after": contention()}
            sec[name] = value
            results["targets"] = evaluate_targets(sec)
            write_results(results, opts.out)

        ours = dtype_name(lm.dtype)
        measured: dict[str, Measurement] = {}
        if {"batched", "dtype", "llama"} & set(sections):
            load = contention()
            batched_runs: dict[str, Callable[[Measurement | None], Measurement]] = {
                ours: lambda m: run_batched(lm, wl, m=m)
            }
            other = None
            if "dtype" in sections:
                other, _ = other_precision(lm, config.model if workload.plan else None)
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
            gguf = _gguf_for(config.model)
            llama_reason = None
            llama_subset = stratified_subset(wl, min(opts.llama_limit, len(wl.rows)))
            gpu = False
            if "llama" in sections:
                llama_reason = (
                    "synthetic rows: the model is not the config's GGUF"
                    if workload.plan is None
                    else _llama_unavailable(gguf, wl)
                )
                if llama_reason is None:
                    assert gguf is not None
                    llamas, gpu = open_llamas(lm, gguf, opts, wl)
                    for t, llm in llamas.items():
                        streams[f"llama.cpp/{t}"] = Stream(
                            llama_subset,
                            lambda rows, llm=llm: run_llama(llm, wl, rows, lm.n_layers),
                        )
            say(
                f"batched: {len(wl.rows)} rows x {wl.sampling.max_new_tokens} tokens "
                f"({', '.join(batched_runs)}), interleaved with {', '.join(streams) or 'nothing'}"
            )
            measured = measure_side_by_side(batched_runs, streams, opts.repeats, say)
            for llm in llamas.values():
                _close(llm)
            if "batched" in sections:
                checkpoint("batched", section_batched(wl, measured, ours, subset), load)
            if other is not None:
                say("dtype: scoring Δ under each dtype")
                checkpoint("dtype", section_dtype(lm, other, wl, measured, embedder), load)
                del other
            if "llama" in sections:
                if llama_reason:
                    sec["llama"] = {"skipped": llama_reason}
                    results["notes"].append(f"llama.cpp section skipped: {llama_reason}")
                else:
                    assert gguf is not None
                    value = section_llama(
                        lm, wl, opts, gguf, measured, ours, llama_subset, gpu, say
                    )
                    checkpoint("llama", value, load)
        base = measured.get(ours)
        if "tuning" in sections:
            load = contention()
            checkpoint("tuning", section_tuning(lm, wl, opts, say), load)
        if "scaling" in sections:
            load = contention()
            checkpoint("scaling", section_scaling(lm, wl, opts, base, say), load)
        if "e2e" in sections:
            if workload.plan is None:
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


def _default_work_dir() -> Path:
    from steering.assets import cache_dir

    return cache_dir() / "bench"


def _options_dict(opts: BenchOptions) -> dict:
    out = {}
    for k, v in opts.__dict__.items():
        out[k] = str(v) if isinstance(v, Path) else (list(v) if isinstance(v, tuple) else v)
    return out


def _plan_workload(config, lm: LoadedModel, embedder) -> Workload:
    from experiments.concepts import load_concepts
    from experiments.phase5 import Timer, build_plan

    graph = load_concepts(
        config.concepts.file, limit=config.concepts.limit, synsets=config.concepts.synsets
    )
    plan = build_plan(config, lm, graph, embedder, Timer())
    return workload_from_plan(plan)


def _gguf_for(model: str) -> Path | None:
    from steering.models import EMBEDDED

    if model == EMBEDDED:
        from steering.assets import embedded_gguf_path

        return embedded_gguf_path()
    if model.endswith(".gguf"):
        return Path(model)
    return None


def _llama_unavailable(gguf: Path | None, wl: Workload) -> str | None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama-cpp-python is not installed (pip install 'steer-eval[judge]')"
    if gguf is None or not gguf.is_file():
        return f"no GGUF file for this model ({gguf})"
    if wl.mode != "additive":
        return "projection steering is not a constant control vector"
    if wl.layer < 1:
        return "llama.cpp control vectors cannot steer layer 0"
    return None


# --------------------------------------------------------------------------- tables


def _fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{suffix}"
    return f"{value}{suffix}"


def render_tables(results: dict) -> list:
    """Rich tables: the comparisons against their targets, then the details."""
    from rich.table import Table

    sec = results.get("sections", {})
    m = results.get("machine", {})
    load = results.get("load_average", {})
    title = (
        f"steer-eval bench - {m.get('cpu', '?')}, {m.get('cpu_count', '?')} cores, "
        f"{m.get('torch_threads', '?')} torch threads, {m.get('device', '?')}; load average "
        f"{load.get('start')} -> {load.get('end')}"
    )
    main = Table("comparison", "ours", "baseline", "ratio", "target", "met", title=title)
    targets = {t["key"]: t for t in results.get("targets", [])}

    def met(key: str) -> str:
        t = targets.get(key)
        if t is None or t["met"] is None:
            return "n/a"
        return "[green]yes[/]" if t["met"] else "[red]no[/]"

    def target(key: str) -> str:
        return targets[key]["target"] if key in targets else ""

    b = sec.get("batched")
    if b:
        ps = b["per_sample"]
        main.add_row(
            "(a) batched vs per-sample HF generate",
            f"{_fmt(b['batched']['tokens_per_second'])} tok/s",
            f"{_fmt(ps['tokens_per_second'])} tok/s"
            + (
                f" ({ps['timed_samples']}/{ps['of_samples']} samples)" if ps["extrapolated"] else ""
            ),
            _fmt(b["ratio_batched_vs_per_sample"], 2, "x"),
            target("batched_vs_per_sample"),
            met("batched_vs_per_sample"),
        )
        for key, value in b.items():
            if key.startswith("ratio_batched_") and key != "ratio_batched_vs_per_sample":
                name = key.removeprefix("ratio_batched_").split("_vs_")[0]
                rate = sec.get("dtype", {}).get("generation", {}).get(name, {})
                main.add_row(
                    f"    batched {name} vs the same per-sample loop",
                    f"{_fmt(rate.get('tokens_per_second'))} tok/s",
                    f"{_fmt(ps['tokens_per_second'])} tok/s",
                    _fmt(value, 2, "x"),
                    "",
                    "",
                )
        one = b["ours_one_row_at_a_time"]
        main.add_row(
            "    ours one row at a time vs per-sample",
            f"{_fmt(one['tokens_per_second'])} tok/s",
            f"{_fmt(ps['tokens_per_second'])} tok/s",
            _fmt(b["ratio_one_row_at_a_time_vs_per_sample"], 2, "x"),
            "",
            "",
        )
    ll = sec.get("llama")
    if ll and "skipped" not in ll:
        main.add_row(
            "(b) ours vs llama.cpp single stream",
            f"{_fmt(ll['ours_batched_tokens_per_second'])} tok/s",
            f"{_fmt(ll['llama_cpp']['tokens_per_second'])} tok/s ({ll['best_threads']} thr)",
            _fmt(ll["ratio_ours_vs_llama_cpp"], 2, "x"),
            target("ours_vs_llama_cpp"),
            met("ours_vs_llama_cpp"),
        )
        for key, value in ll.items():
            if key.startswith("ratio_ours_") and key != "ratio_ours_vs_llama_cpp":
                name = key.removeprefix("ratio_ours_").split("_vs_")[0]
                rate = sec.get("dtype", {}).get("generation", {}).get(name, {})
                main.add_row(
                    f"    ours {name} vs llama.cpp",
                    f"{_fmt(rate.get('tokens_per_second'))} tok/s",
                    f"{_fmt(ll['llama_cpp']['tokens_per_second'])} tok/s",
                    _fmt(value, 2, "x"),
                    "",
                    "",
                )
    elif ll:
        main.add_row("(b) ours vs llama.cpp", "skipped", ll["skipped"], "", "", "")
    d = sec.get("dtype")
    if d:
        gen = d["generation"]
        main.add_row(
            f"dtype: {d['other']} vs {d['base']} generation",
            f"{_fmt(gen[d['other']]['tokens_per_second'])} tok/s",
            f"{_fmt(gen[d['base']]['tokens_per_second'])} tok/s",
            _fmt(d["speedup_other_vs_base"], 2, "x"),
            "Δ, Δs−Δ0 within 2 SE",
            "n/a"
            if "delta_same_within_2se" not in d
            else ("[green]yes[/]" if d["delta_same_within_2se"] else "[red]no[/]"),
        )
    e = sec.get("e2e")
    if e and "skipped" not in e:
        main.add_row(
            "(c) make run end to end (warm)",
            f"{_fmt(e['median_process_wall_seconds'])} s",
            f"run_phase5 {_fmt(e['run_phase5_seconds'])} s",
            "",
            target("make_run_seconds"),
            met("make_run_seconds"),
        )
        main.add_row(
            "(d) peak resident memory",
            f"{_fmt(e['peak_rss_gb'], 2)} GB",
            "",
            "",
            target("peak_memory_gb"),
            met("peak_memory_gb"),
        )
    tables = [main]
    if ll and "skipped" not in ll:
        ag = ll["agreement"]
        t = Table(
            "strength",
            "llama.cpp il",
            "greedy next token",
            "teacher-forced top-1",
            title=f"(b) steering agreement: our hook at layer {ag['our_layer']} vs the control "
            f"vector ({ag['prompts']} prompts, {ag['tokens']} greedy tokens)",
        )
        for v in ag["by_strength"].values():
            t.add_row(
                f"{v['strength']:+g}",
                str(v["llama_il"]),
                v["next_token_agreement"],
                f"{v['teacher_forced_agreement']:.0%} of {v['positions']}",
            )
        tables.append(t)
    if e and "skipped" not in e:
        st = Table("stage", "seconds", "share", title="(c) make run by stage")
        total = e["run_phase5_seconds"] or 1.0
        for name, secs in e["stages_seconds"].items():
            st.add_row(name, _fmt(secs), f"{secs / total:.0%}")
        st.add_row("(unaccounted)", _fmt(e["unaccounted_seconds"]), "")
        st.add_row("process start + imports", _fmt(e["import_seconds"]), "")
        tables.append(st)
    if d and "delta_per_strength" in d:
        dt_ = Table(
            "strength",
            f"mean Δ {d['base']}",
            f"mean Δ {d['other']}",
            "difference ± SE",
            f"Δs−Δ0 {d['base']}",
            f"Δs−Δ0 {d['other']}",
            "difference ± SE",
            title="dtype: Δ per strength, same rows and seeds (differences paired by row)",
        )

        def pm(mean: float | None, se: float | None) -> str:
            return "n/a" if mean is None else f"{mean:+.3f} ± {_fmt(se, 3)}"

        for s, v in d["delta_per_strength"].items():
            dt_.add_row(
                s,
                _fmt(v["mean_delta_base"], 3),
                _fmt(v["mean_delta_other"], 3),
                pm(v["mean_difference"], v["se_difference"]),
                _fmt(v.get("mean_shift_base"), 3),
                _fmt(v.get("mean_shift_other"), 3),
                pm(v.get("mean_shift_difference"), v.get("se_shift_difference")),
            )
        tables.append(dt_)
    sc = sec.get("scaling")
    if sc:
        t = Table("scaling", "rows", "tokens", "seconds", "tok/s", "s/row", title="(e) scaling")
        for label, group in (("concepts", sc["concepts"]), ("new tokens", sc["max_new_tokens"])):
            for k, v in group.items():
                t.add_row(
                    f"{label}={k}",
                    str(v["rows"]),
                    str(v["max_new_tokens"]),
                    _fmt(v["median_seconds"]),
                    _fmt(v["tokens_per_second"]),
                    _fmt(v["seconds_per_row"], 3),
                )
        tables.append(t)
    tu = sec.get("tuning")
    if tu:
        t = Table("setting", "seconds", "tok/s", title=f"tuning ({tu['max_new_tokens']} tokens)")
        for k, v in tu["runs"].items():
            t.add_row(k, _fmt(v["median_seconds"]), _fmt(v["tokens_per_second"]))
        tables.append(t)
    return tables


# --------------------------------------------------------------------------- CLI


ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="YAML experiment config")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="override any config field: --set concepts.limit=5"),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="log more")]


def register(app) -> None:
    """Add ``steer-eval bench`` to the CLI."""
    from experiments.cli.common import console, friendly
    from experiments.cli.common import setup_logging as _setup_logging

    @app.command("bench")
    @friendly
    def bench(
        config: ConfigOpt = DEFAULT_CONFIG,
        set_: SetOpt = None,
        repeats: Annotated[
            int | None, typer.Option(help="repeats of the cheap timings (default 3; quick 1)")
        ] = None,
        e2e_repeats: Annotated[int, typer.Option(help="repeats of the end-to-end run")] = 1,
        per_sample_limit: Annotated[
            int | None,
            typer.Option(help="time the per-sample loop on N samples and extrapolate (15)"),
        ] = None,
        llama_limit: Annotated[
            int | None, typer.Option(help="samples for the llama.cpp single-stream timing (30)")
        ] = None,
        quick: Annotated[bool, typer.Option(help="shrink everything: a smoke test")] = False,
        device: Annotated[
            str | None, typer.Option(help="cpu, cuda, cuda:N (default: config)")
        ] = None,
        dtype: Annotated[
            str | None, typer.Option(help="float32, bfloat16 (default: config)")
        ] = None,
        threads: Annotated[int | None, typer.Option(help="torch.set_num_threads")] = None,
        only: Annotated[
            str | None, typer.Option(help=f"comma-separated sections: {','.join(SECTIONS)}")
        ] = None,
        skip: Annotated[str | None, typer.Option(help="comma-separated sections to skip")] = None,
        out: Annotated[Path, typer.Option(help="results file")] = DEFAULT_OUT,
        verbose: VerboseOpt = False,
    ) -> None:
        """Speed and memory of the Phase 5 workload, measured side by side (bench/results.json)."""
        _setup_logging(verbose)
        chosen = _parse_sections(only, skip)
        kwargs: dict[str, Any] = {
            "config": config,
            "overrides": list(set_ or []),
            "out": out,
            "sections": chosen,
            "e2e_repeats": e2e_repeats,
            "device": device,
            "dtype": dtype,
            "threads": threads,
        }
        for key, value in (
            ("repeats", repeats),
            ("per_sample_limit", per_sample_limit),
            ("llama_limit", llama_limit),
        ):
            if value is not None:
                kwargs[key] = value
        opts = BenchOptions.quick_defaults(**kwargs) if quick else BenchOptions(**kwargs)
        start = time.perf_counter()

        def say(message: str) -> None:
            console.print(f"[dim]{time.perf_counter() - start:7.1f}s[/] {message}")

        results = run_bench(opts, say=say)
        for table in render_tables(results):
            console.print(table)
        console.print(f"wrote {out} in {results['total_seconds']:.0f} s")


def _parse_sections(only: str | None, skip: str | None) -> tuple[str, ...]:
    def parse(text: str) -> set[str]:
        names = {s.strip() for s in text.split(",") if s.strip()}
        unknown = names - set(SECTIONS)
        if unknown:
            raise typer.BadParameter(
                f"unknown bench section(s) {', '.join(sorted(unknown))}; use {', '.join(SECTIONS)}"
            )
        return names

    chosen = parse(only) if only else set(SECTIONS)
    if skip:
        chosen -= parse(skip)
    return tuple(s for s in SECTIONS if s in chosen)


def _main(argv: Sequence[str]) -> int:
    """``python -m experiments.bench _e2e '<json spec>'``: the end-to-end child process."""
    if len(argv) == 2 and argv[0] == "_e2e":
        logging.basicConfig(level=logging.WARNING)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        out = run_e2e_child(json.loads(argv[1]))
        print(E2E_MARKER + json.dumps(out), flush=True)
        return 0
    print("usage: steer-eval bench (this module's own entry point is internal)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover - the e2e child
    sys.exit(_main(sys.argv[1:]))
