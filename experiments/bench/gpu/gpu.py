"""Section ``gpu``: our decode against HF ``generate`` on the users' hardware (CUDA only).

The users run ``google/gemma-3-4b-pt`` on GPUs. This section loads that model's shape
with random weights (``model_load_format: dummy``, steering/dummy.py) in bf16 and times,
at each batch size of ``gpu_rows`` (256 and 1,024), every row steered at the middle layer
with its own direction and coefficient, top-p 0.95 sampling, ``gpu_tokens`` new tokens:

- ours: ``generate_batch`` with the model's CUDA policy (static cache, the decode step in
  a CUDA graph, sampling inside it);
- HF ``generate`` with the same per-row forward hook and its dynamic cache;
- HF ``generate`` with the hook and ``cache_implementation="static"``, which transformers
  compiles on CUDA (the issue measured 150 s for its first call).

For each: the first call (capture or compile included), then the best of ``gpu_repeats``
timed calls, the peak memory, and the fraction of the card's bf16 matrix rate, which
is measured here (a large bf16 ``torch.mm``), not taken from a data sheet. Random
weights make the texts noise and the nucleus nearly the whole vocabulary (the sampler's
worst case); the shapes, kernels and memory are the real model's. The section refuses
to run without CUDA.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import re
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from experiments.bench.core.measure import gpu_peak, rounded, sync
from experiments.bench.core.options import GPU_HF_COMPILED, GPU_HF_DYNAMIC, GPU_OURS, BenchOptions
from experiments.bench.core.workload import Workload
from experiments.bench.decode.batched import hf_sampling_kwargs
from experiments.bench.decode.peers import per_row_hook
from steering.activations import residual_scale
from steering.generation import GenerationRow, generate_batch
from steering.models import LoadedModel, ModelSpecError, load_model, pick_device
from steering.policies import kernels_of, policy_for
from steering.sampling import SamplingConfig
from steering.vector import SteeringVector

PROMPTS = (
    "Tell me about something.",
    "Here is a story:",
    "Tell me about the sea.",
    "The history of the city",
)
NEUTRAL = ("The weather today is mild.", "A list of common household items.")
MATMUL_SIZE = 8192
BETA = 0.2


def matmul_rate(device: torch.device, n: int = MATMUL_SIZE, repeats: int = 20) -> float:
    """The card's measured bf16 matrix rate in FLOP/s: the best of ``repeats`` timed
    ``n x n`` products (after two warm-up products)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(2):
        torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, b)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000.0)
    return 2.0 * n**3 / best


def flop_per_token(lm: LoadedModel) -> float:
    """Matrix FLOP per decoded token: 2 per weight of the decoder layers and of the output
    head (the embedding lookup is free; attention over a short context is under 0.1%).
    About 7.8 GFLOP for Gemma 3 4B."""
    layer_weights = sum(p.numel() for p in lm.layers.parameters())
    head: int = lm.model.get_output_embeddings().weight.numel()
    return 2.0 * (layer_weights + head)


def gpu_workload(lm: LoadedModel, rows: int, tokens: int, seed: int = 0) -> Workload:
    """``rows`` rows, each with its own random unit direction and a strength in [-1, 1]
    (times β and the layer's residual scale α), at the middle layer; top-p 0.95."""
    layer = lm.default_layer
    alpha = residual_scale(lm, NEUTRAL, layer)
    gen = torch.Generator().manual_seed(seed)
    directions = torch.randn(rows, lm.hidden_size, generator=gen)
    strengths = (torch.rand(rows, generator=gen) * 2 - 1).tolist()
    vectors = [SteeringVector.from_direction(d, layer, alpha=alpha, beta=BETA) for d in directions]
    batch = [
        GenerationRow(f"row{i}", PROMPTS[i % len(PROMPTS)], seed + i, i, s * BETA * alpha)
        for i, s in enumerate(strengths)
    ]
    return Workload(
        rows=batch,
        directions=torch.stack([v.direction for v in vectors]),
        vectors=vectors,
        strengths={r.key: s for r, s in zip(batch, strengths, strict=True)},
        layer=layer,
        mode="additive",
        sampling=SamplingConfig(max_new_tokens=tokens, temperature=1.0, top_p=0.95),
        batch_size=rows,
        seed=seed,
    )


def ours_decode(lm: LoadedModel) -> dict[str, Any]:
    """What ours decodes with on ``lm``: the policy's name and, for the CUDA policy, its
    kernels (steering/decode_kernels.py), so a result says which step it timed."""
    out: dict[str, Any] = {"policy": policy_for(lm).name}
    if (kernels := kernels_of(lm)) is not None:
        out["kernels"] = dataclasses.asdict(kernels)
    return out


def run_ours(lm: LoadedModel, wl: Workload) -> int:
    """Our decode of the whole workload in one batch; the new tokens."""
    _, stats = generate_batch(lm, wl.rows, wl.directions, wl.layer, wl.mode, wl.sampling)
    return stats.new_tokens


@torch.inference_mode()
def run_hf(lm: LoadedModel, wl: Workload, static: bool) -> int:
    """HF ``generate`` on the whole workload with the per-row hook (section peers'), the
    hook's tensors already on the card; ``static`` asks for the static, compiled cache."""
    tok = lm.tokenizer
    tok.padding_side = "left"
    enc = tok([r.prompt for r in wl.rows], return_tensors="pt", padding=True).to(lm.device)
    directions = wl.directions.to(lm.device, lm.dtype)
    coefficients = torch.tensor([r.coefficient for r in wl.rows]).to(lm.device, lm.dtype)
    kwargs = hf_sampling_kwargs(lm, wl)
    if static:
        kwargs["cache_implementation"] = "static"
    torch.manual_seed(wl.seed)
    with per_row_hook(lm, wl.layer, directions, coefficients, wl.mode):
        # generate comes with GenerationMixin, which the concrete model classes mix in
        out = lm.model.generate(**enc, **kwargs)  # type: ignore[operator]
    return int(out.shape[0] * (out.shape[1] - enc["input_ids"].shape[1]))


def time_arm(call: Callable[[], int], device: torch.device, repeats: int) -> dict[str, Any]:
    """A first call (warm-up, capture or compile), then ``repeats`` timed calls: seconds
    of each, the best call's tokens/s, and the peak memory over all of them (CUDA)."""

    def timed() -> tuple[float, int]:
        sync(device)
        start = time.perf_counter()
        tokens = call()
        sync(device)
        return time.perf_counter() - start, tokens

    peak: dict[str, int] = {}
    with gpu_peak(device, peak):
        first, _ = timed()
        runs = [timed() for _ in range(repeats)]
    best_seconds, best_tokens = min(runs, key=lambda r: r[0] / max(r[1], 1))
    return {
        "first_call_seconds": rounded(first, 3),
        "seconds": [rounded(s, 4) for s, _ in runs],
        "new_tokens": best_tokens,
        "tokens_per_second": rounded(best_tokens / best_seconds, 1),
        "peak_gib": rounded(peak["gpu_peak_bytes"] / 2**30, 2) if peak else None,
    }


def add_ratios(arms: dict[str, dict[str, Any]]) -> None:
    """Ours over each peer, from the arms' tokens/s."""
    ours = arms.get(GPU_OURS, {}).get("tokens_per_second")
    for name, arm in arms.items():
        rate = arm.get("tokens_per_second")
        if name != GPU_OURS and ours and rate:
            arm["ours_over_this"] = rounded(ours / rate, 3)


def add_rates(arms: dict[str, dict[str, Any]], flop: float, matrix_rate: float) -> None:
    """Each arm's fraction of the matrix rate, and ours over each peer."""
    for arm in arms.values():
        rate = arm.get("tokens_per_second")
        if rate is not None:
            arm["fraction_of_matrix_rate"] = rounded(rate * flop / matrix_rate, 4)
    add_ratios(arms)


# The line the section says as each arm lands; ARM_LINE reads it back from a log, so a
# bench stopped before it wrote its JSON still gives its arms (bench/gpu_check.sh).
ARM_LINE = re.compile(
    r"gpu: (?P<rows>\d+) rows, (?P<arm>[\w-]+): (?P<tps>[\d.]+) tok/s, first call "
    r"(?P<first>[\d.]+) s, peak (?P<peak>[\d.]+|None) GiB"
)


def arm_line(rows: int, name: str, arm: dict[str, Any]) -> str:
    return (
        f"gpu: {rows} rows, {name}: {arm['tokens_per_second']} tok/s, first call "
        f"{arm['first_call_seconds']} s, peak {arm['peak_gib']} GiB"
    )


def time_sizes(
    lm: LoadedModel,
    opts: BenchOptions,
    device: torch.device,
    flop: float,
    matrix_rate: float,
    say: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Every arm at every batch size of ``opts.gpu_rows``, keyed by the size."""
    runs: dict[str, dict[str, Any]] = {}
    for rows in opts.gpu_rows:
        wl = gpu_workload(lm, rows, opts.gpu_tokens)
        arms: dict[str, Callable[[], int]] = {
            GPU_OURS: partial(run_ours, lm, wl),
            GPU_HF_DYNAMIC: partial(run_hf, lm, wl, static=False),
        }
        if opts.gpu_compiled:
            arms[GPU_HF_COMPILED] = partial(run_hf, lm, wl, static=True)
        measured: dict[str, dict[str, Any]] = {}
        for name, call in arms.items():
            say(f"gpu: {rows} rows x {opts.gpu_tokens} tokens, {name}")
            measured[name] = time_arm(call, device, opts.gpu_repeats)
            say(arm_line(rows, name, measured[name]))
        add_rates(measured, flop, matrix_rate)
        runs[str(rows)] = measured
    return runs


def section_gpu(
    opts: BenchOptions, device: torch.device | None, say: Callable[[str], None]
) -> dict[str, Any]:
    """Load the dummy model on the card, measure its matrix rate, time every arm at every
    batch size. Refuses (ModelSpecError) without a CUDA device."""
    device = device or pick_device("cuda")
    if device.type != "cuda":
        raise ModelSpecError(f"section gpu needs a CUDA device, not {device}")
    say(f"gpu: loading {opts.gpu_model} with random weights (bf16) on {device}")
    started = time.perf_counter()
    lm = load_model(opts.gpu_model, device=str(device), dtype="bfloat16", load_format="dummy")
    load_seconds = time.perf_counter() - started
    say("gpu: the card's bf16 matrix rate")
    rate = matmul_rate(device)
    flop = flop_per_token(lm)
    ours = ours_decode(lm)
    try:
        runs = time_sizes(lm, opts, device, flop, rate, say)
    finally:
        del lm
        gc.collect()
        torch.cuda.empty_cache()
    return {
        "model": f"dummy:{opts.gpu_model}",
        "dtype": "bfloat16",
        "gpu": torch.cuda.get_device_name(device),
        "model_load_seconds": rounded(load_seconds, 2),
        "bf16_matrix_tflops": rounded(rate / 1e12, 1),
        "gflop_per_token": rounded(flop / 1e9, 3),
        "tokens": opts.gpu_tokens,
        "ours_decode": ours,
        "runs": runs,
        "how": "one process, one card; each arm: a first call, then the best of "
        f"{opts.gpu_repeats} timed calls; every row its own direction and coefficient "
        "at the middle layer, top-p 0.95, temperature 1; fraction = tok/s x GFLOP per "
        f"token / the measured rate of a {MATMUL_SIZE}^3 bf16 torch.mm",
    }


def script_parser(description: str, tokens: int) -> argparse.ArgumentParser:
    """The arguments the GPU scripts (``gpu_profile``, ``gpu_levers``) share: batch sizes,
    new tokens, a model config loaded with random weights, device, dtype, output file."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", default="256,1024")
    parser.add_argument("--tokens", type=int, default=tokens)
    parser.add_argument("--model", default="gemma-3-4b-pt", help="a dummy model config")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", type=Path, required=True)
    return parser


def script_model(args: argparse.Namespace) -> tuple[LoadedModel, list[int]]:
    """The model of ``script_parser``'s arguments, with random weights, and the batch sizes."""
    device = pick_device(args.device)
    lm = load_model(args.model, device=str(device), dtype=args.dtype, load_format="dummy")
    return lm, [int(r) for r in args.rows.split(",")]
