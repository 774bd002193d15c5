"""Residual-stream activations at one decoder layer, batched and padding-safe.

Pooling leaves out BOS and padding: Gemma's BOS position carries a residual norm
about 10-15x the content tokens' (~88,000 vs ~6,000 at layer 9 of 18), which would swamp any mean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import torch
from torch import nn

from steering.models import LoadedModel

# What a decoder layer returns, and a forward hook on it.
LayerOutput = torch.Tensor | tuple[torch.Tensor, ...]
ForwardHook = Callable[[nn.Module, tuple[Any, ...], LayerOutput], None]


class _StopForward(Exception):
    """Raised inside a hook once the wanted layer has run, to skip the rest of the model."""


def layer_output_tensor(output: torch.Tensor | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """A decoder layer returns a Tensor (Gemma 3, transformers 5) or a tuple (others)."""
    return output[0] if isinstance(output, tuple) else output


@contextmanager
def capture_layer(
    lm: LoadedModel, layer: int, stop: bool = True
) -> Iterator[dict[str, torch.Tensor]]:
    """Capture one layer's output; with ``stop`` the forward pass ends right there."""
    store: dict[str, torch.Tensor] = {}

    def hook(_module: nn.Module, _inputs: tuple[Any, ...], output: LayerOutput) -> None:
        store["hidden"] = layer_output_tensor(output).detach()
        if stop:
            raise _StopForward

    handle = lm.layer(layer).register_forward_hook(hook)
    try:
        yield store
    finally:
        handle.remove()


def content_mask(
    lm: LoadedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """Positions that are real tokens: not padding, not BOS."""
    mask = attention_mask.bool()
    bos = getattr(lm.tokenizer, "bos_token_id", None)
    if bos is not None:
        mask &= input_ids != bos
    return mask


def _batches(texts: Sequence[str], batch_size: int) -> Iterator[tuple[int, list[str]]]:
    for start in range(0, len(texts), batch_size):
        yield start, list(texts[start : start + batch_size])


@contextmanager
def capture_layers(
    lm: LoadedModel, layers: Sequence[int], stop: bool = True
) -> Iterator[dict[int, torch.Tensor]]:
    """Capture several layers' outputs in one pass; with ``stop`` it ends after the last one."""
    store: dict[int, torch.Tensor] = {}
    last = max(layers)

    def make_hook(index: int) -> ForwardHook:
        def hook(_module: nn.Module, _inputs: tuple[Any, ...], output: LayerOutput) -> None:
            store[index] = layer_output_tensor(output).detach()
            if stop and index == last:
                raise _StopForward

        return hook

    handles = [lm.layer(index).register_forward_hook(make_hook(index)) for index in layers]
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()


@torch.inference_mode()
def _layers_hidden(
    lm: LoadedModel, texts: list[str], layers: Sequence[int]
) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    enc = lm.tokenizer(texts, return_tensors="pt", padding=True).to(lm.device)
    with capture_layers(lm, layers) as store, suppress(_StopForward):
        lm.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
    mask = content_mask(lm, enc["input_ids"], enc["attention_mask"])
    return {layer: store[layer].float() for layer in layers}, mask


def pooled_activations_by_layer(
    lm: LoadedModel, texts: Sequence[str], layers: Sequence[int], batch_size: int = 32
) -> dict[int, torch.Tensor]:
    """Mean content-token output of several layers from one forward pass per batch.

    Keys are the layers as given, normalised to 0..n-1 (so -1 becomes the last layer);
    each value is ``[len(texts), hidden]`` fp32, identical to :func:`pooled_activations`.
    """
    wanted = sorted({lm.check_layer(layer) for layer in layers})
    if not wanted:
        raise ValueError("pooled_activations_by_layer needs at least one layer")
    out = {layer: torch.empty(len(texts), lm.hidden_size) for layer in wanted}
    for start, chunk in _batches(texts, batch_size):
        hidden, mask = _layers_hidden(lm, chunk, wanted)
        counts = mask.sum(dim=1, keepdim=True)
        if (counts == 0).any():
            empty = [chunk[i] for i in torch.nonzero(counts[:, 0] == 0)[:, 0].tolist()]
            raise ValueError(f"texts with no tokens besides BOS cannot be pooled: {empty!r}")
        for layer in wanted:
            pooled = (hidden[layer] * mask.unsqueeze(-1)).sum(dim=1) / counts
            out[layer][start : start + len(chunk)] = pooled.cpu()
    return out


def pooled_activations(
    lm: LoadedModel, texts: Sequence[str], layer: int, batch_size: int = 32
) -> torch.Tensor:
    """Mean of the layer output over each text's content tokens: ``[len(texts), hidden]``, fp32."""
    layer = lm.check_layer(layer)
    return pooled_activations_by_layer(lm, texts, [layer], batch_size)[layer]


def token_norms(
    lm: LoadedModel, texts: Sequence[str], layer: int, batch_size: int = 32
) -> torch.Tensor:
    """Per-token residual norms at a layer (BOS and padding excluded), flattened."""
    layer = lm.check_layer(layer)
    norms = []
    for _, chunk in _batches(texts, batch_size):
        hidden, mask = _layers_hidden(lm, chunk, [layer])
        norms.append(hidden[layer].norm(dim=-1)[mask].cpu())
    return torch.cat(norms)


def residual_scale(lm: LoadedModel, neutral_texts: Sequence[str], layer: int) -> float:
    """α: the median per-token residual norm on neutral text.

    Scaling steering by α makes a strength mean the same fraction of the residual on any model.
    """
    return float(token_norms(lm, neutral_texts, layer).median())
