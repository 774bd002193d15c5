"""What each decode kernel swap buys, measured side by side (issue 41).

The H100 profile of one decode step (bench/README.md, "GPU: H100") split a 1,024-row step
into the top-p sort, attention, matrix products and elementwise work. This times our
replayed decode (the CUDA policy, a fresh policy per variant so every variant captures
its own graph) under each variant, in one process, at each batch size:

- ``native``: the transformers kernels (the tested reference);
- ``efficient_attention`` / ``compiled_norms``: one swap of steering/decode_kernels.py;
- ``fused``: both, the CUDA policy's default;
- ``fused_greedy``: argmax instead of the top-p sort, cumsum and search: what a
  sort-free sampler could buy at most (it changes the tokens: a bound, not a lever).

A variant that fails records its error and the others go on. Each variant: a first
call (capture, compile), then the best of ``repeats`` timed calls, as the GPU bench
times its arms; the first run on 2026-11-27 (before ``fused`` was the default) is in
bench/results-gpu-h100.json.

    python -m experiments.bench.gpu.gpu_levers --rows 256,1024 --out levers.json
"""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Callable
from typing import Any

import torch

from experiments.bench.core.measure import rounded
from experiments.bench.core.workload import Workload
from experiments.bench.gpu.gpu import (
    flop_per_token,
    gpu_workload,
    matmul_rate,
    script_model,
    script_parser,
    time_arm,
)
from steering.decode_cuda import CudaPolicy
from steering.decode_kernels import FUSED, NATIVE, DecodeKernels
from steering.generation import generate_batch
from steering.models import LoadedModel

NATIVE_NAME = "native"


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    kernels: DecodeKernels
    greedy: bool = False


VARIANTS: tuple[Variant, ...] = (
    Variant(NATIVE_NAME, NATIVE),
    Variant("efficient_attention", DecodeKernels(attention=True)),
    Variant("compiled_norms", DecodeKernels(norms=True)),
    Variant("fused", FUSED),
    Variant("fused_greedy", FUSED, greedy=True),
)


def time_variant(lm: LoadedModel, wl: Workload, variant: Variant, repeats: int) -> dict[str, Any]:
    """Our decode of ``wl`` under ``variant`` with a policy of its own (its own capture)."""
    if variant.greedy:
        wl = dataclasses.replace(wl, sampling=dataclasses.replace(wl.sampling, greedy=True))
    policy = CudaPolicy(kernels=variant.kernels)

    def call() -> int:
        _, stats = generate_batch(
            lm, wl.rows, wl.directions, wl.layer, wl.mode, wl.sampling, policy=policy
        )
        return stats.new_tokens

    try:
        arm = time_arm(call, lm.device, repeats)
        arm["capture_failed"] = repr(policy.capture_failure) if policy.capture_failure else None
        return arm
    finally:  # the variant's cache and graph go before the next variant allocates its own
        policy.clear()
        gc.collect()
        if lm.device.type == "cuda":
            torch.cuda.empty_cache()


def measure_levers(
    lm: LoadedModel,
    rows: list[int],
    tokens: int,
    repeats: int,
    variants: tuple[Variant, ...] = VARIANTS,
    say: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Every variant at every batch size, with its speed over ``native``; keyed by size."""
    runs: dict[str, dict[str, Any]] = {}
    for n in rows:
        wl = gpu_workload(lm, n, tokens)
        arms: dict[str, dict[str, Any]] = {}
        for variant in variants:
            try:
                arms[variant.name] = time_variant(lm, wl, variant, repeats)
            except Exception as exc:  # one lever the card or stack lacks; the rest go on
                arms[variant.name] = {"error": f"{exc.__class__.__name__}: {exc}"[:400]}
            say(f"levers: {n} rows, {variant.name}: {json.dumps(arms[variant.name])}")
        base = arms.get(NATIVE_NAME, {}).get("tokens_per_second")
        for arm in arms.values():
            rate = arm.get("tokens_per_second")
            if base and rate:
                arm["over_native"] = rounded(rate / base, 3)
        runs[str(n)] = arms
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = script_parser(__doc__.splitlines()[0], tokens=50)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    lm, rows = script_model(args)
    device = lm.device
    result: dict[str, Any] = {
        "model": f"dummy:{args.model}",
        "dtype": args.dtype,
        "tokens": args.tokens,
    }
    if device.type == "cuda":
        result["bf16_matrix_tflops"] = rounded(matmul_rate(device) / 1e12, 1)
        result["gflop_per_token"] = rounded(flop_per_token(lm) / 1e9, 3)
    result["runs"] = measure_levers(lm, rows, args.tokens, args.repeats)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
