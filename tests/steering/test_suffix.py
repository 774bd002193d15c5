"""steering.suffix: the perplexity pass from the steered layer up equals the full pass.

The decode's residual stream leaving the steered layer, before the steering hook, is what
the unsteered model computes there; the upper layers fed with it must give the full
unsteered pass's NLLs up to float summation order, on every supported architecture
(Gemma 3 text-only, the multimodal class the 4B loads as, and Llama), for steered rows
of unequal prompt lengths, with EOS cut rows among them."""

from __future__ import annotations

import pytest
import torch

from steering.generation import GenerationRow, SamplingConfig, continuation_nll, generate_batch
from steering.suffix import decoder_suffix, supports_suffix

PROMPTS = ["tell me about the dog .", "here is a story :", "cat", "a big old tree in the city"]
SAMPLED = SamplingConfig(max_new_tokens=12, temperature=1.0, top_p=0.95)

pytestmark = pytest.mark.usefixtures("one_thread")


def _directions(lm) -> torch.Tensor:
    d = torch.randn(2, lm.hidden_size, generator=torch.Generator().manual_seed(5))
    return d / d.norm(dim=1, keepdim=True)


def _rows(coefficient: float) -> list[GenerationRow]:
    return [
        GenerationRow(f"r{i}", p, seed=i + 1, direction=i % 2, coefficient=coefficient * (i + 1))
        for i, p in enumerate(PROMPTS)
    ]


@pytest.mark.parametrize("fixture", ["tiny_lm", "tiny_llama_lm", "tiny_multimodal_lm"])
def test_the_upper_layers_from_captured_states_give_the_full_pass_nll(fixture, request):
    lm = request.getfixturevalue(fixture)
    assert supports_suffix(lm)
    layer = 1
    directions = _directions(lm)
    states: list = []
    gens, _ = generate_batch(
        lm, _rows(4.0), directions, layer, "additive", SAMPLED, layer_states=states
    )
    plain, _ = generate_batch(lm, _rows(4.0), directions, layer, "additive", SAMPLED)
    # capturing does not touch the decode
    assert [g.token_ids for g in gens] == [g.token_ids for g in plain]
    assert len(states) == len(gens)
    for g, s in zip(gens, states, strict=True):
        assert s.shape == (g.n_prompt_tokens + len(g.token_ids) - 1, lm.hidden_size)
    prompts, conts = [g.prompt for g in gens], [g.token_ids for g in gens]
    full = continuation_nll(lm, prompts, conts)
    upper = continuation_nll(lm, prompts, conts, states=states, from_layer=layer + 1)
    assert all(v is not None for v in upper)
    assert upper == pytest.approx(full, rel=1e-5, abs=1e-6)
    # and the states matter: another row's states give another NLL
    swapped = continuation_nll(
        lm, prompts[:1], conts[:1], states=[states[0] * 1.5], from_layer=layer + 1
    )
    assert abs(swapped[0] - full[0]) > 1e-3


def test_the_decoder_is_whole_again_after_the_suffix(tiny_lm):
    decoder_layers = len(tiny_lm.layers)
    config = tiny_lm.model.config
    types = list(getattr(config, "layer_types", []) or [])
    with decoder_suffix(tiny_lm, 2) as decoder:
        assert len(decoder.layers) == decoder_layers - 2
        assert decoder.config.num_hidden_layers == decoder_layers - 2
    assert len(tiny_lm.layers) == decoder_layers
    assert config.num_hidden_layers == decoder_layers
    assert list(getattr(config, "layer_types", []) or []) == types


def test_a_row_without_states_sends_the_call_down_the_full_pass(tiny_lm):
    """A row without states (a prompt the decode did not see) sends the call down the
    full pass: the result equals it exactly."""
    gens, _ = generate_batch(tiny_lm, _rows(0.0), _directions(tiny_lm), 1, "additive", SAMPLED)
    prompts, conts = [g.prompt for g in gens], [g.token_ids for g in gens]
    full = continuation_nll(tiny_lm, prompts, conts)
    mixed = continuation_nll(tiny_lm, prompts, conts, states=[None] * len(gens), from_layer=2)
    assert mixed == full
