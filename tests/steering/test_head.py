"""steering.head: the output head in blocks of vocabulary rows gives the same logits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from steering.generation import GenerationRow, SamplingConfig, generate_batch
from steering.head import BlockedHead, reused_logits, use_blocked_head

PROPS = settings(derandomize=True, deadline=None, max_examples=60)


@PROPS
@given(
    rows=st.integers(1, 64),
    n_in=st.integers(16, 700),
    n_out=st.integers(1, 3000),
    block=st.sampled_from([0, 256, 512, 768, 1024, 2048]),
    seed=st.integers(0, 2**16),
)
def test_blocked_logits_equal_the_single_product(rows, n_in, n_out, block, seed):
    """Bit for bit: each logit is the same dot product, only the vocabulary is split.
    (MKL's behaviour on the machines measured, the reason blocks are aligned and a short
    tail joins the last block: 1,500 random shapes like these all matched.)"""
    g = torch.Generator().manual_seed(seed)
    linear = nn.Linear(n_in, n_out, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n_out, n_in, generator=g))
    x = torch.randn(rows, 1, n_in, generator=g)
    blocked = BlockedHead(linear, block)
    with torch.inference_mode():  # as generation runs it
        out = blocked(x)
        assert out.shape == (rows, 1, n_out)
        assert torch.equal(out, linear(x))


def test_with_gradients_the_head_is_the_differentiable_single_product():
    linear = nn.Linear(8, 600, bias=False)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(2), requires_grad=True)
    out = BlockedHead(linear, 256)(x)
    out.sum().backward()
    assert x.grad is not None and linear.weight.grad is not None


def test_a_head_with_a_bias_keeps_the_single_product():
    linear = nn.Linear(8, 600)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    assert torch.equal(BlockedHead(linear, 256)(x), linear(x))


def test_the_tail_joins_the_last_block(monkeypatch):
    """600 rows in blocks of 256: products of 256 and 344 rows, never one of 88."""
    linear = nn.Linear(32, 600, bias=False)
    widths: list[int] = []
    original = torch.mm

    def spy(a, b, *, out):
        widths.append(b.shape[1])
        return original(a, b, out=out)

    monkeypatch.setattr(torch, "mm", spy)
    with torch.inference_mode():
        BlockedHead(linear, 256)(torch.randn(2, 32))
    assert widths == [256, 344]


@pytest.mark.parametrize("block", [-256, 100, 300])
def test_unaligned_blocks_are_refused(block):
    with pytest.raises(ValueError, match="multiple of 256"):
        BlockedHead(nn.Linear(8, 600), block)


def test_the_swap_keeps_tied_weights_and_state_dict_names(tiny_lm):
    model = tiny_lm.model
    head = model.get_output_embeddings()
    assert isinstance(head, BlockedHead)  # wrap_model swapped it (a CPU model)
    assert head.weight is model.get_input_embeddings().weight
    assert "lm_head.weight" in model.state_dict()
    assert not any(name.startswith("lm_head.head") for name in model.state_dict())
    before = head.block
    try:
        assert use_blocked_head(model, 256) and head.block == 256  # the same module, re-blocked
        assert model.get_output_embeddings() is head
    finally:
        use_blocked_head(model, before)


def test_a_model_without_a_linear_head_is_left_alone():
    class NoHead(nn.Module):
        def get_output_embeddings(self):
            return None

    assert use_blocked_head(NoHead()) is False


@pytest.mark.usefixtures("one_thread")
def test_generation_is_the_same_with_blocks_as_with_one_product(tiny_lm):
    """Sampled texts and their log-probs with the 512-token vocabulary in two blocks of 256
    equal those of one product."""
    directions = torch.nn.functional.normalize(
        torch.randn(2, 64, generator=torch.Generator().manual_seed(3)), dim=1
    )
    rows = [
        GenerationRow(f"r{i}", p, seed=40 + i, direction=i % 2, coefficient=c)
        for i, (p, c) in enumerate(
            [("tell me about the dog .", 2.0), ("cat", 0.0), ("here is a story :", -2.0)]
        )
    ]
    sampling = SamplingConfig(max_new_tokens=8)
    before = tiny_lm.model.get_output_embeddings().block
    runs = {}
    try:
        for block in (0, 256):
            use_blocked_head(tiny_lm.model, block)
            runs[block], _ = generate_batch(tiny_lm, rows, directions, 1, "additive", sampling)
    finally:
        use_blocked_head(tiny_lm.model, before)
    assert [g.token_ids for g in runs[0]] == [g.token_ids for g in runs[256]]
    assert [g.logprobs for g in runs[0]] == [g.logprobs for g in runs[256]]


def test_reused_logits_write_every_pass_into_one_tensor_with_the_same_bits():
    g = torch.Generator().manual_seed(3)
    linear = nn.Linear(64, 1024, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(1024, 64, generator=g))
    model = nn.Module()
    model.head = BlockedHead(linear, 256)
    model.get_output_embeddings = lambda: model.head
    x, y = torch.randn(5, 64, generator=g), torch.randn(3, 64, generator=g)
    with torch.inference_mode():
        with reused_logits(model):
            a = model.head(x)
            assert torch.equal(a, linear(x))
            with reused_logits(model):  # nested: the outer loop keeps its tensor
                b = model.head(y)
            assert b.data_ptr() == a.data_ptr()  # the second pass overwrote the first
            assert torch.equal(b, linear(y))
            assert model.head(x).data_ptr() == a.data_ptr()
        assert model.head.reused is None  # released on exit
        assert model.head(x).data_ptr() != a.data_ptr()


def test_reused_logits_leave_other_heads_alone():
    model = nn.Linear(4, 8, bias=False)
    model.get_output_embeddings = lambda: model
    with reused_logits(model):
        assert not hasattr(model, "reused")


@PROPS
@given(
    rows=st.integers(1, 40),
    n_in=st.integers(16, 200),
    n_out=st.integers(600, 3000),
    block=st.sampled_from([256, 512, 768]),
    seed=st.integers(0, 2**16),
)
def test_blocked_target_logprobs_equal_the_log_softmax(rows, n_in, n_out, block, seed):
    """The block-by-block log-sum-exp gives each target's log-softmax (up to the float
    rounding of a sum taken in another order), targets in every block and the tail."""
    from steering.head import target_logprobs, target_logprobs_blocked

    g = torch.Generator().manual_seed(seed)
    linear = nn.Linear(n_in, n_out, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(n_out, n_in, generator=g) * 0.3)
    head = BlockedHead(linear, block)
    x = torch.randn(rows, n_in, generator=g)
    targets = torch.randint(0, n_out, (rows,), generator=g)
    targets[0] = n_out - 1  # the last token, inside the tail that joins the last block
    with torch.inference_mode():
        logits = linear(x)
        want = torch.log_softmax(logits.double(), dim=-1).gather(1, targets[:, None])[:, 0]
        got = target_logprobs_blocked(x, head, targets)
        in_place = target_logprobs(logits.clone(), targets)
    assert got.shape == (rows,)
    torch.testing.assert_close(got.double(), want, rtol=0, atol=2e-5)
    torch.testing.assert_close(in_place.double(), want, rtol=0, atol=2e-5)


def test_head_inputs_passes_hidden_states_through_only_where_it_may(tiny_lm):
    """Inside head_inputs the blocked head returns its input; a single-product head and a
    softcapped model are left alone (their caller needs real logits)."""
    from steering.head import head_inputs

    head = tiny_lm.model.get_output_embeddings()
    assert isinstance(head, BlockedHead)
    x = torch.randn(3, head.in_features)
    with torch.inference_mode():
        with head_inputs(tiny_lm.model) as opened:
            assert opened is head
            assert torch.equal(head(x), x)
        assert head(x).shape == (3, head.out_features)
        block, head.block = head.block, 0
        try:
            with head_inputs(tiny_lm.model) as opened:
                assert opened is None
                assert head(x).shape == (3, head.out_features)
        finally:
            head.block = block
        config = tiny_lm.model.config.get_text_config()
        before = getattr(config, "final_logit_softcapping", None)
        config.final_logit_softcapping = 30.0
        try:
            with head_inputs(tiny_lm.model) as opened:
                assert opened is None
        finally:
            config.final_logit_softcapping = before
