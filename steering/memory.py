"""Batch sizes from a CUDA card's free memory, and the peak a run reached.

On the CPU the suite keeps its tuned constants (96 rows per decode batch, a 2^26-entry
logits budget for the perplexity pass, 64 texts per activation batch); nothing here
changes them. On a card, the rows that fit are what the KV cache and the sampler's
per-step tensors need, per row, against the free memory (a fraction of it: the
allocator fragments, and CUDA graphs keep their own pools):

- the decode: keys and values of every layer for the prompt and the new tokens, plus
  about ``SAMPLER_BYTES_PER_LOGIT`` bytes per vocabulary entry per row (the logits in
  fp32, their log-softmax, the masked copy, the probabilities, the sorted values and
  int64 ids, two cumulative sums and the nucleus);
- the perplexity pass: logits entries (model dtype, an fp32 copy, its log-softmax).
"""

from __future__ import annotations

import torch

from steering.models import LoadedModel

USABLE_FRACTION = 0.7  # of the free memory, for one batch's tensors
SAMPLER_BYTES_PER_LOGIT = 44
NLL_BYTES_PER_LOGIT = 12
# past this an H100 gains little (issue 32's bench) and a batch is a long wait
MAX_DECODE_ROWS = 1024
ROW_QUANTUM = 64  # decode batches in multiples of the CUDA policy's larger buckets
MAX_ACTIVATION_TEXTS = 256


def kv_bytes_per_row(lm: LoadedModel, positions: int) -> int:
    """Keys and values of every decoder layer for ``positions`` tokens of one row."""
    config = lm.text_config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return int(lm.n_layers * 2 * heads * head_dim * positions * (torch.finfo(lm.dtype).bits // 8))


def vocab_size(lm: LoadedModel) -> int:
    return int(lm.model.get_output_embeddings().weight.shape[0])


def decode_rows(lm: LoadedModel, positions: int, default: int, free: int | None = None) -> int:
    """Rows per decode batch: ``default`` on the CPU; on a card, what its free memory
    holds for ``positions`` (prompt + new tokens), in multiples of ``ROW_QUANTUM``, at
    least ``default`` rows' worth of the quantum and at most ``MAX_DECODE_ROWS``."""
    free = lm.platform.free_bytes() if free is None else free
    if free is None:
        return default
    per_row = kv_bytes_per_row(lm, positions) + SAMPLER_BYTES_PER_LOGIT * vocab_size(lm)
    rows = int(free * USABLE_FRACTION // per_row)
    rows = min(MAX_DECODE_ROWS, rows // ROW_QUANTUM * ROW_QUANTUM)
    return max(rows, min(default, ROW_QUANTUM))


def nll_logits_budget(lm: LoadedModel, default: int, free: int | None = None) -> int:
    """Logits entries per perplexity forward pass: ``default`` on the CPU, on a card
    what a share of its free memory holds (never less than ``default``)."""
    free = lm.platform.free_bytes() if free is None else free
    if free is None:
        return default
    return max(default, int(free * USABLE_FRACTION // NLL_BYTES_PER_LOGIT))


def activation_texts(lm: LoadedModel, default: int) -> int:
    """Texts per activation-capture batch: ``default`` on the CPU, ``MAX_ACTIVATION_TEXTS``
    on a card (the forward pass stops at the captured layer; a few hundred short texts
    are a few hundred MB of activations even for a 4B model)."""
    return max(default, MAX_ACTIVATION_TEXTS) if lm.platform.on_card else default


def peak_gib(device: torch.device | None = None) -> float | None:
    """The peak memory torch allocated on a CUDA device in this process (None when CUDA
    was never used)."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30
