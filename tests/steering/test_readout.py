"""Output-side scores of a direction on the tiny Gemma: the logit lens reads what a
direction writes toward the vocabulary; the one-step KL measures how far it moves the
next-token distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.readout import (
    concept_token_ids,
    final_norm,
    kl_without,
    last_token_residuals,
    lens_logprobs,
    logit_lens_gain,
    next_token_kl,
)

TEXTS = ["the dog is a small animal .", "here is a story about the sea .", "a tree and a flower ."]


def test_the_final_norm_is_found_in_both_model_classes(tiny_lm, tiny_multimodal_lm):
    assert final_norm(tiny_lm) is tiny_lm.model.model.norm
    assert final_norm(tiny_multimodal_lm) is tiny_multimodal_lm.model.model.language_model.norm


def test_the_lens_of_the_last_layer_output_is_the_models_own_distribution(tiny_lm, one_thread):
    lm = tiny_lm
    residuals = last_token_residuals(lm, TEXTS[:1], lm.n_layers - 1)
    enc = lm.tokenizer(TEXTS[:1], return_tensors="pt")
    with torch.inference_mode():
        logits = lm.model(**enc).logits[0, -1].float()
    assert torch.allclose(lens_logprobs(lm, residuals)[0], torch.log_softmax(logits, -1), atol=1e-4)


def test_a_direction_along_a_tokens_unembedding_raises_that_token(tiny_lm, one_thread):
    lm = tiny_lm
    residuals = last_token_residuals(lm, TEXTS, 2)
    token = concept_token_ids(lm, ["dog"])[0]
    other = concept_token_ids(lm, ["queen"])[0]
    row = lm.model.get_output_embeddings().weight[token].detach().float()
    directions = torch.stack([row / row.norm()] * 3)
    scale = float(residuals.norm(dim=-1).mean())
    coefficients = torch.tensor([0.0, scale, 4 * scale])
    gains = logit_lens_gain(lm, residuals, directions, coefficients, [[token]] * 3)
    assert gains.shape == (3, len(TEXTS))
    assert np.allclose(gains[0], 0, atol=1e-5)  # no steering, no gain
    assert (gains[2] > gains[1]).all() and (gains[1] > 0).all()
    other_gain = logit_lens_gain(lm, residuals, directions[2:], coefficients[2:], [[other]])
    assert (gains[2] > other_gain[0]).all()


def test_the_one_step_kl_is_zero_unsteered_and_grows_with_the_strength(tiny_lm, one_thread):
    lm = tiny_lm
    rng = np.random.default_rng(0)
    d = torch.as_tensor(rng.standard_normal(lm.hidden_size), dtype=torch.float32)
    d = d / d.norm()
    directions = torch.stack([d, d, d])
    coefficients = torch.tensor([0.0, 1.0, 8.0])
    kl = next_token_kl(lm, TEXTS, 2, directions, coefficients)
    assert kl.shape == (3, len(TEXTS))
    assert np.allclose(kl[0], 0, atol=1e-6)
    assert (kl[2] > kl[1]).all() and (kl >= -1e-6).all()  # rounding of batch composition
    # a row's value does not depend on the rows batched with it
    alone = next_token_kl(lm, TEXTS, 2, directions[2:], coefficients[2:], batch_size=1)
    assert np.allclose(alone[0], kl[2], rtol=1e-4, atol=1e-6)


def test_concept_tokens_are_word_initial_deduplicated_and_known(tiny_lm):
    ids = concept_token_ids(tiny_lm, ["dog", "dog", "bird_genus"])
    assert len(ids) == len(set(ids)) and ids[0] == concept_token_ids(tiny_lm, ["dog"])[0]
    # "Dog" is not in the tiny vocabulary: its unknown token is never read
    assert tiny_lm.tokenizer.unk_token_id not in ids
    assert ids[0] == tiny_lm.tokenizer(" dog", add_special_tokens=False)["input_ids"][0]
    with pytest.raises(ValueError):
        concept_token_ids(tiny_lm, [])


def _plain_kl(logp: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    return (logp.exp() * (logp - ref)).sum(dim=-1)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    vocab=st.integers(3, 40),
    seed=st.integers(0, 10_000),
    n_excluded=st.integers(1, 5),
    push=st.floats(0.5, 8.0),
)
def test_mass_moved_only_onto_the_excluded_tokens_leaves_the_concept_free_kl_at_zero(
    vocab, seed, n_excluded, push
):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, vocab, generator=gen, dtype=torch.float64)
    excluded = torch.randperm(vocab, generator=gen)[: min(n_excluded, vocab - 1)].tolist()
    steered = logits.clone()
    steered[:, excluded] += push  # only the concept's tokens gain
    logp, ref = torch.log_softmax(steered, -1), torch.log_softmax(logits, -1)
    plain = _plain_kl(logp, ref)
    assert (plain > 1e-6).all()  # the plain KL counts the mass moved onto them
    assert (kl_without(logp, ref, excluded).abs() < 1e-10).all()
    # nothing excluded: the plain KL, whatever moved
    noise = torch.randn(2, vocab, generator=gen, dtype=torch.float64)
    other = torch.log_softmax(logits + noise, -1)
    assert torch.equal(kl_without(other, ref, ()), _plain_kl(other, ref))
    # a move among the other tokens is seen, and is ≥ 0
    rest = [t for t in range(vocab) if t not in excluded]
    if len(rest) > 1:
        moved = logits.clone()
        moved[:, rest[0]] += push
        free = kl_without(torch.log_softmax(moved, -1), ref, excluded)
        assert (free > 1e-8).all()


def test_the_concept_free_kl_on_the_model_is_the_plain_one_with_nothing_left_out(
    tiny_lm, one_thread
):
    lm = tiny_lm
    rng = np.random.default_rng(1)
    d = torch.as_tensor(rng.standard_normal(lm.hidden_size), dtype=torch.float32)
    directions = torch.stack([d / d.norm()] * 2)
    coefficients = torch.tensor([0.0, 8.0])
    plain = next_token_kl(lm, TEXTS, 2, directions, coefficients)
    assert np.array_equal(next_token_kl(lm, TEXTS, 2, directions, coefficients, exclude=[]), plain)
    tokens = concept_token_ids(lm, ["dog", "tree"])
    free = next_token_kl(lm, TEXTS, 2, directions, coefficients, exclude=tokens)
    assert free.shape == plain.shape and np.isfinite(free).all()
    assert np.allclose(free[0], 0, atol=1e-6) and (free[1] > 0).all()
    assert not np.allclose(free[1], plain[1])  # the concept's tokens moved too
