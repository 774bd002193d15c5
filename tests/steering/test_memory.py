"""steering.memory: batch sizes from a card's free memory; the CPU keeps its constants."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.memory import (
    MAX_DECODE_ROWS,
    ROW_QUANTUM,
    activation_texts,
    decode_rows,
    kv_bytes_per_row,
    nll_logits_budget,
    peak_gib,
)
from steering.models import load_model

GIB = 2**30


@pytest.fixture(scope="module")
def gemma_4b():
    return load_model("gemma-3-4b-pt", device="meta", dtype="bfloat16", load_format="dummy")


def test_the_cpu_keeps_its_tuned_sizes(tiny_lm):
    assert decode_rows(tiny_lm, 60, 96) == 96
    assert nll_logits_budget(tiny_lm, 1 << 26) == 1 << 26
    assert activation_texts(tiny_lm, 64) == 64


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_no_peak_without_cuda():
    assert peak_gib() is None


def test_the_4b_kv_cache_per_row(gemma_4b):
    # 34 layers x keys and values x 4 KV heads x head dim 256 x 2 bytes (bf16)
    assert kv_bytes_per_row(gemma_4b, 64) == 34 * 2 * 4 * 256 * 2 * 64


def test_the_4b_on_an_80_gb_card(gemma_4b):
    """~20 MB per row at 64 positions (9 MB of cache, 11.5 MB of sampler tensors): a
    nearly empty H100 holds the cap, 20 GiB free about 700 rows."""
    assert decode_rows(gemma_4b, 64, 96, free=70 * GIB) == MAX_DECODE_ROWS
    assert decode_rows(gemma_4b, 64, 96, free=20 * GIB) == 704
    assert nll_logits_budget(gemma_4b, 1 << 26, free=20 * GIB) > 1 << 26


@settings(derandomize=True, deadline=None, max_examples=50)
@given(free=st.integers(0, 200 * GIB), more=st.integers(0, 50 * GIB), positions=st.integers(1, 512))
def test_decode_rows_are_whole_quanta_within_bounds_and_grow_with_memory(
    gemma_4b, free, more, positions
):
    rows = decode_rows(gemma_4b, positions, 96, free=free)
    assert rows % ROW_QUANTUM == 0 and ROW_QUANTUM <= rows <= MAX_DECODE_ROWS
    assert decode_rows(gemma_4b, positions, 96, free=free + more) >= rows


@pytest.mark.cuda
def test_on_a_card_the_sizes_come_from_its_memory(make_tiny_lm):
    lm = make_tiny_lm(device="cuda")
    rows = decode_rows(lm, 64, 96)
    assert rows % ROW_QUANTUM == 0 and rows <= MAX_DECODE_ROWS
    assert activation_texts(lm, 64) >= 64
    assert nll_logits_budget(lm, 1 << 26) >= 1 << 26
