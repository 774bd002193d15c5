"""The output head as a product in blocks of vocabulary rows, for CPU decoding.

The embedded model's head is a 262,144 x 640 matrix: on the CPU it is half of every
decode step (``make bench``, section ``profile``). One ``x @ W.T`` over all of it ran at
78 GFLOP/s for 90 rows on a 2-core AMD EPYC (MKL); the same product as 128 products of
2,048 vocabulary rows each ran at 109 GFLOP/s, and at 54 and 256 rows the blocks won
too (section ``head`` measures it on the machine at hand). Each logit is still the
same 640-term dot product, only the split of the vocabulary changes, and on the
machines measured the logits were bit-identical to ``F.linear``'s (the section checks
that as well). That is MKL's behaviour, not a law: products of a few rows, or blocks
that start off a 64-byte boundary, took other kernels whose sums differed in the last
bit. Hence blocks are a multiple of ``BLOCK_QUANTUM`` rows and a short tail joins the
last block. torch and MKL offer no switch for this blocking, hence these few lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

from steering.scratch import Scratch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

HEAD_BLOCK = 2048  # vocabulary rows per product
BLOCK_QUANTUM = 256


def check_block(block: int) -> int:
    if block < 0 or block % BLOCK_QUANTUM:
        raise ValueError(
            f"head block {block}: use 0 (one product) or a multiple of {BLOCK_QUANTUM} rows; "
            "smaller or unaligned blocks can change the logits in the last bit"
        )
    return block


class BlockedHead(nn.Linear):
    """``nn.Linear`` whose forward computes ``x @ W.T`` in blocks of ``block`` output rows.

    It shares the original head's parameters (so tied embeddings stay tied) and keeps its
    state-dict names; ``block=0`` is the single product."""

    def __init__(self, head: nn.Linear, block: int = HEAD_BLOCK) -> None:
        super().__init__(head.in_features, head.out_features, bias=False, device="meta")
        self.weight = head.weight
        self.bias = head.bias
        self.block = check_block(block)
        self.reused: Scratch | None = None  # set while reused_logits is open
        self.passthrough = False  # set while head_inputs is open: forward returns its input

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.passthrough:
            return x
        n_out = self.out_features
        tracked = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        if self.block <= 0 or self.block >= n_out or self.bias is not None or tracked:
            # F.linear adds a bias inside the product, and writing into ``out`` blocks
            # has no gradient: both keep the single product.
            return super().forward(x)
        flat = x.reshape(-1, self.in_features)
        out = (self.reused or Scratch()).take("logits", (flat.shape[0], n_out), x)
        weight = self.weight
        starts = range(0, n_out - self.block + 1, self.block)  # a short tail joins the last
        for start in starts:
            end = n_out if start == starts[-1] else start + self.block
            torch.mm(flat, weight[start:end].t(), out=out[:, start:end])
        return out.view(*x.shape[:-1], n_out)


def use_blocked_head(model: PreTrainedModel, block: int = HEAD_BLOCK) -> bool:
    """Swap a CPU model's linear output head for a :class:`BlockedHead` (``block`` rows;
    0 restores the single product). Returns whether the model has such a head."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, nn.Linear) or head.weight.device.type != "cpu":
        return False
    if isinstance(head, BlockedHead):
        head.block = check_block(block)
    else:
        model.set_output_embeddings(BlockedHead(head, block))
    return True


@contextmanager
def reused_logits(model: PreTrainedModel) -> Iterator[None]:
    """While open, a :class:`BlockedHead` writes every call's logits into one tensor that it
    keeps, so each call overwrites the previous call's logits.

    For loops that are done with one forward pass's logits before the next (a decode step,
    a perplexity chunk): a fresh [rows, 262,144] tensor per pass (90-256 MiB) was paged in
    and zeroed by the kernel each time, which cost about as much as the softmax after it.
    A no-op for other heads (the GPU's caching allocator has no such cost).
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, BlockedHead) or head.reused is not None:
        yield  # not ours to reuse, or an enclosing loop already reuses it
        return
    head.reused = Scratch()
    try:
        yield
    finally:
        head.reused = None


@contextmanager
def single_product(model: PreTrainedModel) -> Iterator[None]:
    """While open, a :class:`BlockedHead` computes its logits as one ``F.linear`` (the
    reference decode's head); a no-op for other heads."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if not isinstance(head, BlockedHead):
        yield
        return
    block, head.block = head.block, 0
    try:
        yield
    finally:
        head.block = block


def _softcapped(model: PreTrainedModel) -> bool:
    """Whether the model transforms its logits after the head (Gemma 2's final softcap)."""
    config: object = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "final_logit_softcapping", None) is not None


@contextmanager
def head_inputs(model: PreTrainedModel) -> Iterator[BlockedHead | None]:
    """While open, a :class:`BlockedHead` returns its input, the final hidden states at the
    kept positions, instead of their logits; yields that head (None, and nothing changed,
    for another head, a single-product one, or a model that transforms logits after the
    head, where the caller needs the logits themselves).

    For :func:`target_logprobs_blocked`: a teacher-forced pass wants one log-probability
    per position, and 262,144 logits per position written out and read back (twice, with
    a log-softmax) cost more than the head's product on the CPU."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    usable = (
        isinstance(head, BlockedHead)
        and head.block > 0
        and head.bias is None
        and not head.passthrough
        and not _softcapped(model)
    )
    if not usable:
        yield None
        return
    assert isinstance(head, BlockedHead)
    head.passthrough = True
    try:
        yield head
    finally:
        head.passthrough = False


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) per row of fp32 ``logits`` [rows, vocab]: the target's logit minus the
    log-sum-exp of the row, computed in place on ``logits`` (the caller is done with them),
    so no log-softmax tensor is built."""
    chosen = logits.gather(1, targets[:, None])[:, 0]
    top = logits.amax(dim=-1, keepdim=True)
    return chosen - (top[:, 0] + logits.sub_(top).exp_().sum(dim=-1).log())


def target_logprobs_blocked(
    hidden: torch.Tensor, head: BlockedHead, targets: torch.Tensor, scratch: Scratch | None = None
) -> torch.Tensor:
    """log p(target) per row of ``hidden`` [rows, hidden size] through ``head``, one block of
    vocabulary rows at a time: each block's logits (the same products as the head's own
    blocks, hence the same values) feed a running max and sum of exponentials and are
    then overwritten, so at most [rows, block] logits exist at once.

    The log-sum-exp is accumulated block by block (rescaled when the running max moves),
    so it can differ from a one-pass log-softmax in the last bits; the target's logit is
    the head's own."""
    flat = hidden.reshape(-1, head.in_features)
    if flat.dtype != head.weight.dtype:
        flat = flat.to(head.weight.dtype)
    rows, n_out, block = flat.shape[0], head.out_features, head.block
    buf = (scratch or Scratch()).take("head_block", (rows, min(2 * block, n_out)), flat)
    targets = targets.to(flat.device)
    best = torch.full((rows,), float("-inf"), device=flat.device)
    total = torch.zeros(rows, device=flat.device)
    chosen = torch.zeros(rows, device=flat.device)
    # a short tail joins the last block, as in the head; a vocabulary under a block is one
    starts = range(0, max(n_out - block, 0) + 1, block)
    for start in starts:
        end = n_out if start == starts[-1] else start + block
        logits = buf[:, : end - start]
        torch.mm(flat, head.weight[start:end].t(), out=logits)
        logits = logits.float()
        inside = (targets >= start) & (targets < end)
        if inside.any():
            local = (targets - start).clamp(0, end - start - 1)
            picked = logits.gather(1, local[:, None])[:, 0]
            chosen = torch.where(inside, picked, chosen)
        peak = torch.maximum(best, logits.amax(dim=-1))
        total = total * torch.exp(best - peak) + logits.sub_(peak[:, None]).exp_().sum(dim=-1)
        best = peak
    return chosen - (best + total.log())
