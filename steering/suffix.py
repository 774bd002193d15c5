"""The unsteered model's upper layers alone, fed the residual stream a decode computed.

The perplexity check scores each steered text under the unsteered model. Below the
steered layer nothing differs between the steered and the unsteered forward pass (the
steering hook sits on the layer's output and attention is causal), so the decode's own
residual stream at that layer, taken before the hook adds the vector, is what the
unsteered pass would compute there. Running only the layers above it skips
``(layer + 1) / n_layers`` of the decoder work of the pass (10 of 18 layers on the
embedded model at layer 9): the same quantity, summed in another order (the decode
built each position's state one step at a time), so NLLs move in their last bits.

:func:`capture_layer_states` records the states during generation;
:func:`decoder_suffix` runs the text decoder from a layer on, by handing its forward
the suffix of its layer list (and of ``config.layer_types``, which Gemma 3's forward
indexes by position in that list). Only architectures whose text decoder loops over
``self.layers[: config.num_hidden_layers]`` with per-layer types from the config are
supported (:data:`SUFFIX_MODELS`, each held to the full pass by the tests); others keep
the full pass. transformers offers no entry point mid-stack, hence these lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from steering.activations import LayerOutput, layer_output_tensor
from steering.models import LoadedModel, find_decoder_layers

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# config.model_type of the text decoders whose forward the suffix is tested against
SUFFIX_MODELS = frozenset({"gemma3_text", "llama"})


def _text_decoder(lm: LoadedModel) -> PreTrainedModel | None:
    """The module whose ``layers`` are the decoder layers (Gemma3TextModel, LlamaModel):
    None when that module is not a supported text decoder."""
    layers = find_decoder_layers(lm.model)
    for module in lm.model.modules():
        if getattr(module, "layers", None) is layers:
            config = getattr(module, "config", None)
            if getattr(config, "model_type", None) in SUFFIX_MODELS:
                return cast("PreTrainedModel", module)  # Gemma3TextModel, LlamaModel
            return None
    return None


def supports_suffix(lm: LoadedModel) -> bool:
    return _text_decoder(lm) is not None


@contextmanager
def decoder_suffix(lm: LoadedModel, start: int) -> Iterator[nn.Module]:
    """While open, the text decoder runs layers ``start`` .. ``n_layers - 1`` only (then
    its final norm): feed it ``inputs_embeds`` = the residual stream entering ``start``."""
    decoder = _text_decoder(lm)
    if decoder is None:
        raise ValueError(f"{type(lm.model).__name__}: no supported text decoder to run from")
    config = decoder.config
    layers, n_layers = cast(nn.ModuleList, decoder.layers), config.num_hidden_layers
    layer_types = getattr(config, "layer_types", None)
    decoder.layers = nn.ModuleList(list(layers)[start:])
    config.num_hidden_layers = n_layers - start
    if layer_types is not None:
        config.layer_types = list(layer_types)[start:]
    try:
        yield decoder
    finally:
        decoder.layers = layers
        config.num_hidden_layers = n_layers
        if layer_types is not None:
            config.layer_types = layer_types


@contextmanager
def capture_layer_states(lm: LoadedModel, layer: int, into: list[torch.Tensor]) -> Iterator[None]:
    """While open, every forward pass appends the output of decoder layer ``layer`` as it
    leaves the layer, before any steering hook edits it (the hook is prepended)."""

    def keep(_module: nn.Module, _inputs: tuple[Any, ...], output: LayerOutput) -> None:
        into.append(layer_output_tensor(output).detach().clone())

    handle = lm.layer(layer).register_forward_hook(keep, prepend=True)
    try:
        yield
    finally:
        handle.remove()


def row_states(
    steps: list[torch.Tensor], prompt_lengths: list[int], lengths: list[int]
) -> list[torch.Tensor | None]:
    """Per row, the captured states of its prompt and of every generated token but the
    last: the positions whose next-token predictions score its continuation. ``steps``
    are the captures of one decode (the prompt's pass, then one per step), rows
    left-padded to the prompt's width."""
    if not steps:
        return [None] * len(lengths)
    states = torch.cat(steps, dim=1)
    width = steps[0].shape[1]
    out: list[torch.Tensor | None] = []
    for i, (p, n) in enumerate(zip(prompt_lengths, lengths, strict=True)):
        out.append(states[i, width - p : width + n - 1] if n > 0 else None)
    return out
