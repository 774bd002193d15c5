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

import torch
from torch import nn

from steering.scratch import Scratch

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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


def use_blocked_head(model: nn.Module, block: int = HEAD_BLOCK) -> bool:
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
def reused_logits(model: nn.Module) -> Iterator[None]:
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
def single_product(model: nn.Module) -> Iterator[None]:
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
