"""steering.decode_kernels: the fused norm is the model's norm, the swaps come and go with
their block, a failed compile falls back, and the CUDA policy under the swapped norms
decodes what the reference decodes (traced by dynamo; the eager backend needs no C
compiler). The fused kernels' own numbers on a card are in the tests marked cuda."""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch

from steering.decode import ReferencePolicy
from steering.decode_cuda import CudaPolicy
from steering.decode_kernels import (
    FUSED,
    NATIVE,
    DecodeKernels,
    NormCompileWarning,
    _Compiled,
    compiled_norms,
    gemma_rms_norm,
)
from steering.generation import GenerationRow, SamplingConfig, generate_batch

pytestmark = pytest.mark.usefixtures("one_thread")
TRACED = DecodeKernels(norms=True, backend="eager")


def _norms(lm):
    return [m for m in lm.model.modules() if type(m).__name__ == "Gemma3RMSNorm"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_written_out_norm_is_the_models_norm_bit_for_bit(tiny_lm, dtype):
    gen = torch.Generator().manual_seed(0)
    norms = _norms(tiny_lm)
    assert len(norms) > 4  # layer norms and the attention's q/k norms
    for module in norms:
        x = (torch.randn(3, 2, module.weight.shape[0], generator=gen) * 3).to(dtype)
        copy = deepcopy(module).to(dtype)
        assert torch.equal(gemma_rms_norm(x, copy.weight, copy.eps), copy(x))


def test_swapped_norms_give_the_same_logits_and_go_back(tiny_lm):
    ids = torch.tensor([[2, 5, 7, 11]])
    with torch.inference_mode():
        want = tiny_lm.model(input_ids=ids).logits
        with compiled_norms(tiny_lm, backend="eager") as swapped:
            assert swapped == len(_norms(tiny_lm))
            got = tiny_lm.model(input_ids=ids).logits
    assert torch.equal(got, want)
    assert all("forward" not in vars(m) for m in tiny_lm.model.modules())


def test_a_compile_that_fails_warns_once_and_the_native_norm_runs():
    def broken(_graph, _inputs):
        raise RuntimeError("no compiler here")

    fused = _Compiled(gemma_rms_norm, broken)
    x, w = torch.randn(2, 8), torch.randn(8)
    with pytest.warns(NormCompileWarning, match="no compiler here"):
        first = fused(x, w, 1e-6)
    second = fused(x, w, 1e-6)  # no second warning: the native norm from now on
    assert fused.failed
    assert torch.equal(first, gemma_rms_norm(x, w, 1e-6)) and torch.equal(second, first)


@pytest.mark.filterwarnings("error::steering.decode_kernels.NormCompileWarning")
def test_many_models_norms_compile_without_passing_dynamos_limit():
    """Widths and dtypes of several models in one process (the card's test run hit
    dynamo's limit of 8 compiles on its fourth model and fell back to the native norm)."""
    fused = _Compiled(gemma_rms_norm, "eager")
    gen = torch.Generator().manual_seed(1)
    for width in (16, 64, 256, 640, 1152, 2560):
        for dtype in (torch.float32, torch.bfloat16):
            w = torch.randn(width, generator=gen).to(dtype)
            for shape in ((1, 1, width), (5, 3, width), (4, 1, 2, width)):
                x = torch.randn(*shape, generator=gen).to(dtype)
                assert torch.equal(fused(x, w, 1e-6), gemma_rms_norm(x, w, 1e-6))
    assert not fused.failed


def test_the_policy_picks_fused_kernels_on_cuda_only(tiny_lm):
    assert CudaPolicy().kernels_for(tiny_lm) == NATIVE  # the CPU
    assert CudaPolicy(kernels=FUSED).kernels_for(tiny_lm) == FUSED


@pytest.mark.filterwarnings("error::steering.decode_kernels.NormCompileWarning")
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_the_cuda_policy_with_swapped_norms_decodes_the_reference(tiny_lm, directions, greedy):
    rows = [
        GenerationRow(f"r{i}", p, 11 + i, i % 2, c)
        for i, (p, c) in enumerate(
            [("Tell me about the sea.", 0.0), ("A story:", 3.0), ("Hello", -3.0)]
        )
    ]
    sampling = SamplingConfig(max_new_tokens=6, greedy=greedy, top_p=0.9)
    swapped_during: list[bool] = []
    norm = _norms(tiny_lm)[0]

    def on_step(_step, _steps):
        swapped_during.append("forward" in vars(norm))

    got, _ = generate_batch(
        tiny_lm, rows, directions, 1, "additive", sampling, on_step,
        policy=CudaPolicy(graphs=False, kernels=TRACED),
    )  # fmt: skip
    want, _ = generate_batch(
        tiny_lm, rows, directions, 1, "additive", sampling, policy=ReferencePolicy()
    )
    assert swapped_during and all(swapped_during)
    assert "forward" not in vars(norm)
    assert [g.token_ids for g in got] == [g.token_ids for g in want]
    for a, b in zip(got, want, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_norm_on_a_card_is_the_native_norm_to_rounding(dtype):
    """Inductor's one-kernel norm against the eager ops, at the 4B's decode shapes: the
    hidden norm (2,560) and the q/k norms (256 per head)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    fused = _Compiled(gemma_rms_norm, "inductor")
    for shape in [(256, 1, 2560), (1024, 1, 2560), (256, 1, 8, 256), (3, 17, 2560)]:
        x = (torch.randn(*shape, generator=gen, device="cuda") * 4).to(dtype)
        w = (torch.randn(shape[-1], generator=gen, device="cuda") * 0.5).to(dtype)
        got, want = fused(x, w, 1e-6), gemma_rms_norm(x, w, 1e-6)
        assert got.dtype == want.dtype and got.shape == want.shape
        if dtype == torch.bfloat16:  # one bf16 rounding step at most
            torch.testing.assert_close(got, want, rtol=2**-7, atol=1e-6)
        else:
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert not fused.failed


def test_a_run_tag_says_how_the_texts_were_decoded(tiny_lm):
    from steering.policies import decode_description

    assert decode_description(tiny_lm) == "cpu"
    assert FUSED.describe() == "efficient attention, compiled norms"
    assert NATIVE.describe() == "native kernels"
    assert DecodeKernels(norms=True).describe() == "compiled norms"
