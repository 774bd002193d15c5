"""What each lever the decode profile named would buy, measured side by side (issue 41).

The H100 profile of one decode step (bench/README.md, "GPU: H100") split a 1,024-row step
into the top-p sort, attention, matrix products and elementwise work, and named three
levers without measuring them. This times our replayed decode (the CUDA policy, a fresh
policy per variant so every variant captures its own graph) under each variant, in one
process, at each batch size:

- ``as_is``: the policy as it ships;
- ``greedy``: argmax instead of the top-p sort, cumsum and search: what a sort-free
  sampler could buy at most (it changes the tokens, so it is a bound, not a lever);
- ``sdpa_efficient`` / ``sdpa_cudnn``: the attention kernel pinned to one SDPA backend
  (the profile found cuDNN's flash kernel, built for long queries, reading the KV cache at
  about a quarter of the card's bandwidth for a one-token query);
- ``compiled_norms``: every RMS norm one fused kernel (``torch.compile`` of the norm
  alone, so the compile stays short), instead of the eager norm's fp32 casts, mean,
  rsqrt and multiplies;
- ``compiled_norms+sdpa_efficient``: both.

A variant that fails (a backend the card lacks, no compiler) records its error and the
others go on. Each variant: a first call (capture, compile), then the best of
``repeats`` timed calls, as the GPU bench times its arms.

    python -m experiments.bench.gpu_levers --rows 256,1024 --out levers.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from experiments.bench.gpu import flop_per_token, gpu_workload, matmul_rate, time_arm
from experiments.bench.measure import rounded
from experiments.bench.workload import Workload
from steering.decode_cuda import CudaPolicy
from steering.generation import generate_batch
from steering.models import LoadedModel, load_model, pick_device

AS_IS = "as_is"


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma 3's RMS norm, written as transformers' ``Gemma3RMSNorm.forward`` computes it
    (fp32, ``(1 + w)``, cast back), as one function a compiler can fuse."""
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (out * (1.0 + weight.float())).type_as(x)


@contextlib.contextmanager
def compiled_norms(lm: LoadedModel, backend: str = "inductor") -> Iterator[None]:
    """Every module whose class is named ``...RMSNorm`` runs :func:`rms_norm` compiled
    (one compiled function shared by all: weights are its inputs, so modules do not
    recompile it); the modules' own ``forward`` comes back on exit."""
    fused = torch.compile(rms_norm, fullgraph=True, backend=backend)
    patched = []
    for module in lm.model.modules():
        if type(module).__name__.endswith("RMSNorm") and hasattr(module, "weight"):
            module.forward = lambda x, m=module: fused(x, m.weight, m.eps)
            patched.append(module)
    if not patched:
        raise RuntimeError("no RMSNorm modules to compile")
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def sdpa_backend(name: str) -> Callable[[LoadedModel], contextlib.AbstractContextManager]:
    """A variant that pins ``torch.nn.functional.scaled_dot_product_attention`` to one
    backend (``EFFICIENT_ATTENTION``, ``CUDNN_ATTENTION``, ...)."""

    def pinned(_lm: LoadedModel) -> contextlib.AbstractContextManager:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, name)])

    return pinned


@contextlib.contextmanager
def _both(lm: LoadedModel) -> Iterator[None]:
    with compiled_norms(lm), sdpa_backend("EFFICIENT_ATTENTION")(lm):
        yield


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    context: Callable[[LoadedModel], contextlib.AbstractContextManager]
    greedy: bool = False


VARIANTS: tuple[Variant, ...] = (
    Variant(AS_IS, lambda _lm: contextlib.nullcontext()),
    Variant("greedy", lambda _lm: contextlib.nullcontext(), greedy=True),
    Variant("sdpa_efficient", sdpa_backend("EFFICIENT_ATTENTION")),
    Variant("sdpa_cudnn", sdpa_backend("CUDNN_ATTENTION")),
    Variant("compiled_norms", compiled_norms),
    Variant("compiled_norms+sdpa_efficient", _both),
)


def time_variant(lm: LoadedModel, wl: Workload, variant: Variant, repeats: int) -> dict:
    """Our decode of ``wl`` under ``variant`` with a policy of its own (its own capture)."""
    if variant.greedy:
        wl = dataclasses.replace(wl, sampling=dataclasses.replace(wl.sampling, greedy=True))
    policy = CudaPolicy()

    def call() -> int:
        _, stats = generate_batch(
            lm, wl.rows, wl.directions, wl.layer, wl.mode, wl.sampling, policy=policy
        )
        return stats.new_tokens

    try:
        with variant.context(lm):
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
) -> dict[str, dict]:
    """Every variant at every batch size, with its speed over ``as_is``; keyed by size."""
    runs: dict[str, dict] = {}
    for n in rows:
        wl = gpu_workload(lm, n, tokens)
        arms: dict[str, dict] = {}
        for variant in variants:
            try:
                arms[variant.name] = time_variant(lm, wl, variant, repeats)
            except Exception as exc:  # one lever the card or stack lacks; the rest go on
                arms[variant.name] = {"error": f"{exc.__class__.__name__}: {exc}"[:400]}
            say(f"levers: {n} rows, {variant.name}: {json.dumps(arms[variant.name])}")
        base = arms.get(AS_IS, {}).get("tokens_per_second")
        for arm in arms.values():
            rate = arm.get("tokens_per_second")
            if base and rate:
                arm["over_as_is"] = rounded(rate / base, 3)
        runs[str(n)] = arms
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="256,1024")
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="gemma-3-4b-pt", help="a dummy model config")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    device = pick_device(args.device)
    lm = load_model(args.model, device=str(device), dtype=args.dtype, load_format="dummy")
    rows = [int(r) for r in args.rows.split(",")]
    result: dict = {"model": f"dummy:{args.model}", "dtype": args.dtype, "tokens": args.tokens}
    if device.type == "cuda":
        result["bf16_matrix_tflops"] = rounded(matmul_rate(device) / 1e12, 1)
        result["gflop_per_token"] = rounded(flop_per_token(lm) / 1e9, 3)
    result["runs"] = measure_levers(lm, rows, args.tokens, args.repeats)
    args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
