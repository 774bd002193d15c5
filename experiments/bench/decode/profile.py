"""Section ``profile``: where one decode step of our batched generation spends its time.

``generate_batch`` runs unchanged under the torch profiler. Forward hooks mark the
decoder layers, the output head and the steering hook with ``record_function`` ranges,
and each forward pass as a whole; a decode step is the window from one forward pass to
the next, so the part of it outside the forward pass is sampling and bookkeeping. Shares
are of the mean decode step (the prefill, step 0, is reported apart).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import Any

import torch
from torch.autograd.profiler import record_function

from experiments.bench.core.measure import rounded
from experiments.bench.core.workload import Workload, batches_of
from experiments.bench.decode.batched import generate_ours
from steering.models import LoadedModel

FORWARD, LAYER, HEAD, HOOK = "bench::forward", "bench::layer", "bench::head", "bench::hook"
PARTS = {"layers": LAYER, "output_head": HEAD, "steering_hook": HOOK}


class _Ranges:
    """Open and close ``record_function`` ranges from module hooks."""

    def __init__(self) -> None:
        self.open: dict[str, Any] = {}

    def start(self, name: str) -> None:
        self.stop(name)
        rf = record_function(name)
        rf.__enter__()
        self.open[name] = rf

    def stop(self, name: str) -> None:
        rf = self.open.pop(name, None)
        if rf is not None:
            rf.__exit__(None, None, None)


@contextmanager
def marked(lm: LoadedModel, steered_layer: int) -> Iterator[None]:
    """Ranges around every forward pass, decoder layer and the output head, and around the
    steering hook: these hooks are registered before ``generate_batch`` installs its own,
    so on the steered layer ours run first and the steering hook runs between the end of
    that layer's range and the start of the next module's."""
    ranges = _Ranges()
    handles = []

    def pre(name: str) -> Callable[..., None]:
        def hook(*_args: Any) -> None:
            ranges.stop(HOOK)
            ranges.start(name)

        return hook

    def post(name: str, then: str | None = None) -> Callable[..., None]:
        def hook(*_args: Any) -> None:
            ranges.stop(name)
            if then:
                ranges.start(then)

        return hook

    head = lm.model.get_output_embeddings()
    steered = lm.layer(steered_layer)
    layers = [(layer, LAYER, HOOK if layer is steered else None) for layer in lm.layers]
    for module, name, then in [*layers, (head, HEAD, None), (lm.model, FORWARD, None)]:
        handles.append(module.register_forward_pre_hook(pre(name)))
        handles.append(module.register_forward_hook(post(name, then)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        for name in list(ranges.open):
            with suppress(Exception):
                ranges.stop(name)


def _events(prof: Any) -> list[tuple[str, float, float]]:
    """(name, start, end) in microseconds of our ranges, by start time."""
    out = []
    for e in prof.events():
        if e.name.startswith("bench::"):
            out.append((e.name, float(e.time_range.start), float(e.time_range.end)))
    return sorted(out, key=lambda x: x[1])


def step_breakdown(events: list[tuple[str, float, float]]) -> list[dict[str, float]]:
    """Per step (forward pass k to forward pass k+1): microseconds in each part."""
    forwards = [e for e in events if e[0] == FORWARD]
    steps = []
    for k in range(len(forwards) - 1):
        start, fwd_end, end = forwards[k][1], forwards[k][2], forwards[k + 1][1]
        parts = {
            part: sum(e[2] - e[1] for e in events if e[0] == name and start <= e[1] < fwd_end)
            for part, name in PARTS.items()
        }
        forward = fwd_end - start
        parts["rest_of_forward"] = forward - sum(parts.values())
        parts["sampling_and_bookkeeping"] = end - fwd_end
        parts["step"] = end - start
        steps.append(parts)
    return steps


def section_profile(lm: LoadedModel, wl: Workload, tokens: int) -> dict[str, Any]:
    """Profile ``generate_batch`` over the first batch of the grid for ``tokens`` steps: the
    share of one decode step spent in the layers, the output head, sampling, the hook."""
    batch = batches_of(lm, wl.rows, wl.batch_size)[0]
    sampling = replace(wl.sampling, max_new_tokens=tokens)
    # one unprofiled pass so allocations and kernel choices are warm
    generate_ours(lm, wl, batch, sampling)
    with (
        marked(lm, wl.layer),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof,
    ):
        generate_ours(lm, wl, batch, sampling)
    steps = step_breakdown(_events(prof))
    if len(steps) < 2:
        raise RuntimeError("the profiled generation stopped before a decode step")
    decode = steps[1:]  # step 0 is the prefill
    mean = {k: statistics.fmean(s[k] for s in decode) for k in decode[0]}
    total = mean["step"]
    return {
        "rows": len(batch),
        "tokens": tokens,
        "decode_steps": len(decode),
        "mean_decode_step_ms": rounded(total / 1000, 3),
        "share": {k: rounded(v / total, 4) for k, v in mean.items() if k != "step"},
        "ms": {k: rounded(v / 1000, 3) for k, v in mean.items() if k != "step"},
        "prefill_ms": rounded(steps[0]["step"] / 1000, 3),
        "how": "torch.profiler over generate_batch on the grid's first batch; record_function "
        "ranges from forward hooks on each decoder layer, the output head and the whole model; "
        "the steering hook is timed between the steered layer's end and the next module's "
        "start; sampling and bookkeeping is the rest of a step after the forward pass; mean "
        "over the decode steps (profiler overhead inflates the many small ops)",
        "torch_threads": torch.get_num_threads(),
    }
