"""steering.activations: padding-safe pooling that leaves BOS out, and residual norms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steering.activations import (
    capture_layer,
    capture_layers,
    content_mask,
    layer_output_tensor,
    pooled_activations,
    pooled_activations_by_layer,
    residual_scale,
    token_norms,
)

TEXTS = [
    "the dog is red and happy",
    "cat",
    "a big old tree in the city by the sea",
    "tell me about something .",
]
ATOL = 1e-5


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def padding_side(tiny_lm):
    """Set the tokenizer's padding side for one test and restore it afterwards."""
    tokenizer = tiny_lm.tokenizer
    before = tokenizer.padding_side

    def set_side(side: str) -> None:
        tokenizer.padding_side = side

    yield set_side
    tokenizer.padding_side = before


def _hidden_states(lm, texts):
    """Every ``output_hidden_states`` entry of one unpadded-or-padded batch, and its encoding."""
    enc = lm.tokenizer(texts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = lm.model(**enc, output_hidden_states=True)
    return out.hidden_states, enc


def _layer_outputs(lm, texts):
    """Each decoder layer's raw output, captured by our own hooks (no early stop)."""
    enc = lm.tokenizer(texts, return_tensors="pt", padding=True)
    outputs: dict[int, torch.Tensor] = {}
    handles = [
        layer.register_forward_hook(
            lambda _m, _i, o, i=i: outputs.__setitem__(i, layer_output_tensor(o).detach())
        )
        for i, layer in enumerate(lm.layers)
    ]
    try:
        with torch.inference_mode():
            lm.model(**enc)
    finally:
        for handle in handles:
            handle.remove()
    return outputs, enc


# ---------------------------------------------------------------------------- masks


def test_content_mask_excludes_bos_and_padding(tiny_lm, padding_side):
    tok = tiny_lm.tokenizer
    for side in ("left", "right"):
        padding_side(side)
        enc = tok(["the dog is red", "cat"], return_tensors="pt", padding=True)
        mask = content_mask(tiny_lm, enc["input_ids"], enc["attention_mask"])
        assert mask.dtype == torch.bool
        assert mask.sum(dim=1).tolist() == [4, 1]
        assert not mask[enc["input_ids"] == tok.bos_token_id].any()
        assert not mask[enc["attention_mask"] == 0].any()
        expected = enc["attention_mask"].bool() & (enc["input_ids"] != tok.bos_token_id)
        assert torch.equal(mask, expected)
    # the tiny tokenizer really does prepend BOS, so the exclusion is exercised
    assert tok("cat")["input_ids"][0] == tok.bos_token_id


def test_layer_output_tensor_accepts_tuple_and_tensor():
    t = torch.ones(2, 3, 4)
    assert layer_output_tensor(t) is t
    assert layer_output_tensor((t, "cache")) is t


# ---------------------------------------------------------------------------- padding


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("layer", [0, 2, 3])
def test_pooled_vector_does_not_depend_on_batch_padding(tiny_lm, padding_side, side, layer):
    padding_side(side)
    alone = torch.cat([pooled_activations(tiny_lm, [t], layer) for t in TEXTS])
    batch = pooled_activations(tiny_lm, TEXTS, layer)
    assert tiny_lm.tokenizer.padding_side == side  # pooling does not change the setting
    lengths = [len(tiny_lm.tokenizer(t)["input_ids"]) for t in TEXTS]
    assert len(set(lengths)) > 1  # the batch really is padded
    assert batch.shape == (len(TEXTS), tiny_lm.hidden_size)
    assert batch.dtype == torch.float32
    torch.testing.assert_close(batch, alone, atol=ATOL, rtol=1e-5)


def test_pooled_vector_does_not_depend_on_batch_size(tiny_lm):
    one = pooled_activations(tiny_lm, TEXTS, 1, batch_size=1)
    two = pooled_activations(tiny_lm, TEXTS, 1, batch_size=3)
    torch.testing.assert_close(one, two, atol=ATOL, rtol=1e-5)


def test_padding_side_fixture_restored(tiny_lm):
    # runs after the parametrised cases above; generation relies on left padding
    assert tiny_lm.tokenizer.padding_side == "left"


# ---------------------------------------------------------------------------- pooling maths


def test_layer_hook_matches_hidden_states_convention(tiny_lm):
    """A layer hook sees ``hidden_states[layer + 1]``, except the last layer: there
    ``hidden_states[-1]`` has the final norm applied (transformers 5, Gemma 3)."""
    hidden_states, _ = _hidden_states(tiny_lm, TEXTS)
    outputs, _ = _layer_outputs(tiny_lm, TEXTS)
    n = tiny_lm.n_layers
    assert len(hidden_states) == n + 1
    for layer in range(n - 1):
        assert torch.equal(outputs[layer], hidden_states[layer + 1])
    assert not torch.allclose(outputs[n - 1], hidden_states[n])
    with torch.inference_mode():
        normed = tiny_lm.model.model.norm(outputs[n - 1])
    torch.testing.assert_close(normed, hidden_states[n])


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_pooling_is_the_mean_of_hidden_states_over_non_bos_tokens(tiny_lm, layer):
    hidden_states, enc = _hidden_states(tiny_lm, TEXTS)
    h = hidden_states[layer + 1]
    bos = tiny_lm.tokenizer.bos_token_id
    expected = []
    for i in range(len(TEXTS)):
        keep = enc["attention_mask"][i].bool() & (enc["input_ids"][i] != bos)
        expected.append(h[i][keep].mean(dim=0))
    pooled = pooled_activations(tiny_lm, TEXTS, layer)
    torch.testing.assert_close(pooled, torch.stack(expected), atol=ATOL, rtol=1e-5)
    # including BOS would give a different vector: the exclusion is not a no-op
    with_bos = torch.stack(
        [h[i][enc["attention_mask"][i].bool()].mean(dim=0) for i in range(len(TEXTS))]
    )
    assert not torch.allclose(pooled, with_bos, atol=1e-3)


def test_pooling_the_last_layer_uses_the_pre_norm_layer_output(tiny_lm):
    outputs, enc = _layer_outputs(tiny_lm, TEXTS)
    mask = content_mask(tiny_lm, enc["input_ids"], enc["attention_mask"])
    h = outputs[tiny_lm.n_layers - 1]
    expected = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    for layer in (-1, tiny_lm.n_layers - 1):
        pooled = pooled_activations(tiny_lm, TEXTS, layer)
        torch.testing.assert_close(pooled, expected, atol=ATOL, rtol=1e-5)


def test_pooling_a_text_with_only_bos_fails_loudly(tiny_lm):
    with pytest.raises(ValueError, match="no tokens besides BOS"):
        pooled_activations(tiny_lm, ["the dog", ""], 1)


def test_pooling_rejects_a_bad_layer(tiny_lm):
    from steering.models import LayerIndexError

    with pytest.raises(LayerIndexError):
        pooled_activations(tiny_lm, TEXTS, 4)


def test_capture_layer_removes_its_hook(tiny_lm):
    # transformers installs its own persistent output-capturing hook once
    # output_hidden_states has been used, so compare with the hooks present before
    layer = tiny_lm.layer(1)
    before = dict(layer._forward_hooks)
    with capture_layer(tiny_lm, 1, stop=False) as store:
        assert len(layer._forward_hooks) == len(before) + 1
        enc = tiny_lm.tokenizer(["the dog"], return_tensors="pt")
        with torch.inference_mode():
            tiny_lm.model(**enc)
    assert dict(layer._forward_hooks) == before
    assert store["hidden"].shape == (1, 3, tiny_lm.hidden_size)


def test_several_layers_from_one_pass_equal_one_layer_each(tiny_lm, padding_side):
    padding_side("left")
    by_layer = pooled_activations_by_layer(tiny_lm, TEXTS, [3, 0, -3, 2], batch_size=3)
    assert sorted(by_layer) == [0, 1, 2, 3]  # -3 is layer 1 of 4
    for layer, pooled in by_layer.items():
        assert torch.equal(pooled, pooled_activations(tiny_lm, TEXTS, layer, batch_size=3))


def test_several_layers_reject_a_bad_layer_and_no_layer(tiny_lm):
    from steering.models import LayerIndexError

    with pytest.raises(LayerIndexError, match="out of range"):
        pooled_activations_by_layer(tiny_lm, TEXTS, [1, 7])
    with pytest.raises(ValueError, match="at least one layer"):
        pooled_activations_by_layer(tiny_lm, TEXTS, [])


def test_capture_layers_stops_after_the_last_and_removes_its_hooks(tiny_lm):
    layers = [tiny_lm.layer(i) for i in range(4)]
    before = [dict(layer._forward_hooks) for layer in layers]
    enc = tiny_lm.tokenizer(["the dog"], return_tensors="pt")
    with capture_layers(tiny_lm, [0, 2], stop=False) as store, torch.inference_mode():
        tiny_lm.model(**enc)
    assert sorted(store) == [0, 2]
    assert [dict(layer._forward_hooks) for layer in layers] == before


# ---------------------------------------------------------------------------- norms


def test_token_norms_are_per_content_token(tiny_lm):
    layer = 1
    hidden_states, enc = _hidden_states(tiny_lm, TEXTS)
    mask = content_mask(tiny_lm, enc["input_ids"], enc["attention_mask"])
    norms = token_norms(tiny_lm, TEXTS, layer)
    assert norms.shape == (int(mask.sum()),)
    expected = hidden_states[layer + 1].norm(dim=-1)[mask]
    torch.testing.assert_close(norms, expected, atol=1e-4, rtol=1e-5)


def test_residual_scale_is_the_median_token_norm(tiny_lm):
    # 1 + 5 + 3 = 9 content tokens: an odd count, so the median is one token's norm
    texts = ["cat", "the dog is very red", "a big tree"]
    layer = 2
    hidden_states, enc = _hidden_states(tiny_lm, texts)
    mask = content_mask(tiny_lm, enc["input_ids"], enc["attention_mask"])
    manual = hidden_states[layer + 1].norm(dim=-1)[mask].double().numpy()
    assert manual.size % 2 == 1
    alpha = residual_scale(tiny_lm, texts, layer)
    assert isinstance(alpha, float)
    assert alpha == pytest.approx(float(np.median(manual)), rel=1e-5)
    assert np.sum(manual < alpha * (1 - 1e-6)) == manual.size // 2


# ---------------------------------------------------------------------------- embedded model


@pytest.mark.integration
def test_embedded_bos_norm_dwarfs_content_and_pooling_leaves_it_out(embedded_lm):
    """Measured at layer 9: BOS ~88,000, content tokens ~5,000-8,500 (about 12x)."""
    lm, layer = embedded_lm, 9
    texts = ["The dog barked at the mailman.", "Tell me about something.", "Here is a story:"]
    outputs: dict[str, torch.Tensor] = {}
    enc = lm.tokenizer(texts, return_tensors="pt", padding=True)
    with capture_layer(lm, layer, stop=False) as store, torch.inference_mode():
        lm.model(**enc, logits_to_keep=1)
    outputs["hidden"] = store["hidden"].float()
    norms = outputs["hidden"].norm(dim=-1)
    bos = enc["input_ids"] == lm.tokenizer.bos_token_id
    mask = content_mask(lm, enc["input_ids"], enc["attention_mask"])
    assert int(bos.sum()) == len(texts)  # one BOS per text
    bos_norm = float(norms[bos].min())
    content_max = float(norms[mask].max())
    assert bos_norm > 5 * content_max
    assert bos_norm > 10 * float(norms[mask].median())

    pooled = pooled_activations(lm, texts, layer)
    expected = (outputs["hidden"] * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    torch.testing.assert_close(pooled, expected, rtol=1e-4, atol=1e-2)
    # a mean that let BOS in would be pulled far above every content token's norm
    assert float(pooled.norm(dim=-1).max()) <= content_max
    alone = torch.cat([pooled_activations(lm, [t], layer) for t in texts])
    torch.testing.assert_close(pooled, alone, rtol=1e-4, atol=1e-1)
    alpha = residual_scale(lm, texts, layer)
    assert 1_000 < alpha < bos_norm / 5
