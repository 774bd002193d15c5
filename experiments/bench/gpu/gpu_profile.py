"""Where one decode step of ours spends the card's time: kernel time by kind (issue 41).

The GPU bench gives each arm's tokens/s; where a target is missed, this says why. It
runs ``generate_batch`` on the GPU workload with the CUDA policy's eager static step
(``graphs=False``: the kernels the graph replays, launched one by one) under the torch
profiler, marks each decode step (not the prefill) with a range from ``on_step``, and
sums the CUDA kernels launched inside those ranges by kind: matrix products, attention,
the top-p sort, softmax, and the rest. The sum per step is what a replayed graph costs
at best (a graph removes the launches, not the kernels).

    python -m experiments.bench.gpu.gpu_profile --rows 256,1024 --out profile.json
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

import torch

from experiments.bench.core.measure import rounded
from experiments.bench.decode.profile import _Ranges
from experiments.bench.gpu.gpu import gpu_workload, script_model, script_parser
from steering.decode_cuda import CudaPolicy
from steering.decode_kernels import FUSED, NATIVE, DecodeKernels
from steering.generation import generate_batch
from steering.models import LoadedModel

STEP = "bench::decode_step"
# A kernel's kind: the first whose words occur in its lower-cased name.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sort", ("sort", "radix")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "efficient")),
    ("matmul", ("gemm", "gemv", "cutlass", "xmma", "nvjet", "cublas", "mm_", "addmm", "linear")),
    ("softmax", ("softmax",)),
    ("scan", ("scan", "cumsum")),
    ("reduce", ("reduce",)),
)


def kind_of(name: str) -> str:
    low = name.lower()
    return next((kind for kind, words in KINDS if any(w in low for w in words)), "other")


def _subtree(event: Any) -> Iterable[Any]:
    yield event
    for child in event.cpu_children:
        yield from _subtree(child)


def step_kernels(events: Iterable[Any]) -> tuple[int, dict[str, float], float]:
    """(decode steps, microseconds per kernel name, host microseconds per step range)
    over the kernels launched inside the ``STEP`` ranges."""
    kernels: defaultdict[str, float] = defaultdict(float)
    steps, host = 0, 0.0
    for event in events:
        # the range's host event only: on CUDA the profiler also lists the range on the
        # card's timeline (a user annotation, same name), which counted each step twice
        # DeviceType is torch._C._autograd's, which torch.autograd imports without re-exporting
        cpu = torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
        if event.name != STEP or event.device_type != cpu:
            continue
        steps += 1
        host += event.time_range.end - event.time_range.start
        for op in _subtree(event):
            for k in getattr(op, "kernels", []):
                kernels[k.name] += k.duration
    return steps, dict(kernels), host / max(steps, 1)


def _self_device_us(event: Any) -> float:
    """An op's own time on the card (``self_cuda_time_total`` in older torch)."""
    return getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0))


def profile_rows(
    lm: LoadedModel, rows: int, tokens: int, kernels: DecodeKernels | None = None
) -> dict[str, Any]:
    """The mean decode step of ``rows`` rows: kernel time by kind and the top kernels.
    ``kernels``: the step's (default: the CUDA policy's for the device)."""
    wl = gpu_workload(lm, rows, tokens)
    policy = CudaPolicy(graphs=False, kernels=kernels)

    def run(on_step: Callable[[int, int], None] | None = None) -> None:
        generate_batch(
            lm, wl.rows, wl.directions, wl.layer, wl.mode, wl.sampling, on_step, policy=policy
        )

    run()  # warm: allocations, cuBLAS handles, kernel choices
    ranges = _Ranges()

    def on_step(step: int, _steps: int) -> None:
        ranges.stop(STEP)
        if step >= 1:  # step 0 is the prefill
            ranges.start(STEP)

    activities = [torch.profiler.ProfilerActivity.CPU]
    if lm.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        run(on_step)
        ranges.stop(STEP)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
    try:
        steps, by_name, host = step_kernels(prof.events())
    except Exception as exc:  # a profiler whose events lack the tree: keep the by-op table
        print(f"kernels by step unavailable ({exc!r}); the whole call's ops follow")
        steps, by_name, host = 0, {}, 0.0
    per_step = {name: us / max(steps, 1) for name, us in by_name.items()}
    by_kind: dict[str, float] = defaultdict(float)
    for name, us in per_step.items():
        by_kind[kind_of(name)] += us
    total = sum(per_step.values())
    top = sorted(per_step.items(), key=lambda kv: -kv[1])[:12]
    whole = sorted(prof.key_averages(), key=lambda e: -_self_device_us(e))[:15]
    return {
        "rows": rows,
        "kernels": dataclasses.asdict(policy.kernels_for(lm)),
        "decode_steps": steps,
        "kernel_ms_per_step": rounded(total / 1000, 3),
        "host_ms_per_step_eager": rounded(host / 1000, 3),
        "by_kind_ms": {k: rounded(v / 1000, 3) for k, v in sorted(by_kind.items())},
        "by_kind_share": {k: rounded(v / total, 3) for k, v in by_kind.items()} if total else {},
        "top_kernels_ms": [{"kernel": n[:160], "ms": rounded(us / 1000, 3)} for n, us in top],
        # the whole profiled call (prefill included), by op: a check on the ranges above
        "whole_call_top_ops": [
            {
                "op": e.key[:120],
                "calls": e.count,
                "self_device_ms": rounded(_self_device_us(e) / 1000, 3),
                "self_cpu_ms": rounded(e.self_cpu_time_total / 1000, 3),
            }
            for e in whole
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = script_parser(__doc__.splitlines()[0], tokens=12)
    parser.add_argument(
        "--kernels", choices=("policy", "native", "fused"), default="policy",
        help="the step's kernels: the CUDA policy's default for the device, or one set",
    )  # fmt: skip
    args = parser.parse_args(argv)
    lm, sizes = script_model(args)
    kernels = {"policy": None, "native": NATIVE, "fused": FUSED}[args.kernels]
    results = []
    for rows in sizes:
        result = profile_rows(lm, rows, args.tokens, kernels)
        print(json.dumps(result, indent=1), flush=True)
        results.append(result)
    args.out.write_text(json.dumps({"model": f"dummy:{args.model}", "profiles": results}, indent=2))


if __name__ == "__main__":
    main()
