"""The GPU levers' timing harness on the CPU: each variant timed with its own policy, a
failing variant recorded beside the others, and the compiled norm the model's own."""

from __future__ import annotations

import contextlib

import pytest
import torch

from experiments.bench.gpu_levers import (
    AS_IS,
    Variant,
    compiled_norms,
    measure_levers,
    rms_norm,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _failing(_lm):
    raise RuntimeError("no such kernel on this card")


def test_every_variant_is_timed_and_a_failing_one_is_recorded(tiny_lm):
    variants = (
        Variant(AS_IS, lambda _lm: contextlib.nullcontext()),
        Variant("greedy", lambda _lm: contextlib.nullcontext(), greedy=True),
        Variant("broken", _failing),
    )
    lines: list[str] = []
    runs = measure_levers(tiny_lm, [3], tokens=4, repeats=1, variants=variants, say=lines.append)
    arms = runs["3"]
    assert set(arms) == {AS_IS, "greedy", "broken"}
    assert arms[AS_IS]["new_tokens"] == 3 * 4 and arms[AS_IS]["over_as_is"] == 1.0
    assert arms["greedy"]["tokens_per_second"] > 0 and "over_as_is" in arms["greedy"]
    assert arms["broken"] == {"error": "RuntimeError: no such kernel on this card"}
    assert arms[AS_IS]["capture_failed"] is None
    assert len(lines) == 3 and lines[-1].startswith("levers: 3 rows, broken:")


def test_the_fused_norm_is_the_models_norm_bit_for_bit(tiny_lm):
    norms = [m for m in tiny_lm.model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert norms
    gen = torch.Generator().manual_seed(0)
    for module in norms[:4]:
        x = torch.randn(3, 2, module.weight.shape[0], generator=gen).to(module.weight.dtype)
        assert torch.equal(rms_norm(x, module.weight, module.eps), module(x))


def test_compiled_norms_trace_whole_and_give_the_forward_back(tiny_lm):
    """fullgraph tracing (the eager backend: no C compiler needed) of every norm; the same
    logits inside, the modules' own forward after."""
    ids = torch.tensor([[2, 5, 7, 11]])
    with torch.inference_mode():
        want = tiny_lm.model(input_ids=ids).logits
        with compiled_norms(tiny_lm, backend="eager"):
            got = tiny_lm.model(input_ids=ids).logits
    assert torch.equal(got, want)
    assert all("forward" not in vars(m) for m in tiny_lm.model.modules())
