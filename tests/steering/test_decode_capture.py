"""The CUDA policy's decode step is safe to capture, proven on the CPU (issue 37, item 5).

A CUDA graph records the step once and replays it: a Python value that changes from
step to step (an int counter, a shape, a branch on a host number) is frozen into the
graph and replayed silently. ``torch.compile(fullgraph=True)`` on the CPU fails on the
same things, loudly: it traces the step once into one graph (any host sync or
untraceable op is a graph break, an error with ``fullgraph``), guards on every Python
value the trace read, and recompiles when one changes, which
``error_on_recompile`` turns into an error. So the real policy, with the compiled step
as its capture, must compile once and replay steps 2…N and the next batch with the
eager static step's tokens and log-probs.

A capture that fails at run time falls back to the eager static step with one warning;
the failure is injected as the capture function (the policy's seam for it).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

from steering.decode_cuda import CaptureFallbackWarning, CudaPolicy
from steering.generation import GenerationRow, SamplingConfig, generate_batch

LAYER = 1
PROMPTS = ["tell me about the dog .", "here is a story :", "cat", "a big old tree in the city"]
SAMPLED = SamplingConfig(max_new_tokens=12, temperature=1.0, top_p=0.95)
GREEDY = SamplingConfig(max_new_tokens=12, greedy=True)

# Compiled, the step's fp32 log-probs differ from the eager step's in the last bits (about
# 5e-7 here; under dynamo transformers also takes its compile-time code paths), while a
# CUDA graph replays the eager step's own kernels. Tokens must be equal; log-probs to this.
COMPILED_LOGPROB_TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_thread")


def rows(first_seed: int, n: int = 6) -> list[GenerationRow]:
    coefficients = (0.0, 3.0, -3.0)
    return [
        GenerationRow(
            f"r{i}",
            PROMPTS[i % 4],
            seed=first_seed + i,
            direction=i % 2,
            coefficient=coefficients[i % 3],
        )
        for i in range(n)
    ]


def run(lm, batch, directions, sampling, policy):
    gens, _ = generate_batch(lm, batch, directions, LAYER, "additive", sampling, policy=policy)
    return [(g.token_ids, g.logprobs, g.stopped_at_eos) for g in gens]


def assert_same(got, want, logprob_tol=0.0):
    for (tokens, logprobs, eos), (want_tokens, want_logprobs, want_eos) in zip(
        got, want, strict=True
    ):
        assert tokens == want_tokens and eos == want_eos
        assert logprobs == pytest.approx(want_logprobs, abs=logprob_tol, rel=0)


def compiled_capture(counter):
    """The CPU stand-in for a CUDA graph: the step compiled whole, once."""

    def capture(step):
        return torch.compile(step, fullgraph=True, backend=counter)

    return capture


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("sampling", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
def test_the_step_compiles_once_and_replays_the_eager_steps_tokens(
    tiny_lm, directions, backend, sampling
):
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    graphed = CudaPolicy(graphs=True, capture=compiled_capture(counter))
    eager = CudaPolicy(graphs=False)
    with torch._dynamo.config.patch(error_on_recompile=True), warnings.catch_warnings():
        warnings.simplefilter("error", CaptureFallbackWarning)  # a fallback would hide a break
        for seed in (40, 90):  # the second batch replays the first batch's capture
            got = run(tiny_lm, rows(seed), directions, sampling, graphed)
            want = run(tiny_lm, rows(seed), directions, sampling, eager)
            assert_same(got, want, COMPILED_LOGPROB_TOL)
    assert counter.frame_count == 1  # one graph, no break, no recompile
    assert graphed.capture_failure is None and graphed.graphs
    static = next(iter(graphed._static.values()))
    assert static.replay is not None  # the steps after the warm-up were replayed


def test_a_failed_capture_falls_back_to_the_eager_step_with_one_warning(tiny_lm, directions):
    def failing(step):
        raise RuntimeError("operation not permitted when stream is capturing")

    policy = CudaPolicy(graphs=True, capture=failing)
    eager = CudaPolicy(graphs=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [run(tiny_lm, rows(seed, n), directions, SAMPLED, policy) for seed, n in
               ((40, 6), (90, 6), (7, 11))]  # fmt: skip
    want = [run(tiny_lm, rows(seed, n), directions, SAMPLED, eager) for seed, n in
            ((40, 6), (90, 6), (7, 11))]  # fmt: skip
    assert got == want
    fallbacks = [w for w in caught if issubclass(w.category, CaptureFallbackWarning)]
    assert len(fallbacks) == 1  # one warning for the run, not one per batch or bucket
    assert "operation not permitted when stream is capturing" in str(fallbacks[0].message)
    assert not policy.graphs and isinstance(policy.capture_failure, RuntimeError)
