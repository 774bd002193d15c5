"""The likelihood outcome on the tiny random Gemma: exactness, batching, a planted direction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from steering.activations import residual_scale
from steering.generation import continuation_nll
from steering.likelihood import (
    LikelihoodRow,
    UnsteeredLoglik,
    encode_texts,
    likelihood_outcomes,
    pair_effects,
    steered_loglik,
    text_loglik,
)
from steering.vector import Direction

PREFIX = "here is a story :"
ON = ["the dog and the dog ran", "a dog is a good dog", "my dog can see the dog", "old dog"]
OFF = ["the cat and the cat ran", "a cat is a good cat", "my cat can see the cat", "old cat"]


@pytest.fixture
def setup(tiny_lm, one_thread):
    last = tiny_lm.n_layers - 1
    alpha = residual_scale(tiny_lm, ON + OFF, last)
    weight = tiny_lm.model.get_output_embeddings().weight.detach()
    dog = tiny_lm.tokenizer.convert_tokens_to_ids("dog")
    planted = weight[dog] / weight[dog].norm()
    gen = torch.Generator().manual_seed(0)
    random = torch.randn(tiny_lm.hidden_size, generator=gen)
    return tiny_lm, last, alpha, planted, random / random.norm()


def test_unsteered_loglik_is_the_continuation_nll(setup):
    """An independent path: continuation_nll's mean NLL of the same tokens after the prefix."""
    lm = setup[0]
    encoded = encode_texts(lm, ON + OFF, PREFIX)
    ll = text_loglik(lm, encoded)
    nll = continuation_nll(lm, [PREFIX] * len(encoded), [e.target for e in encoded])
    assert ll == pytest.approx(-np.array(nll), abs=1e-5)
    assert all(
        e.target == tuple(lm.tokenizer(" " + t, add_special_tokens=False)["input_ids"])
        for e, t in zip(encoded, ON + OFF, strict=True)
    )


def test_strength_zero_is_exactly_the_unsteered_loglik(setup):
    lm, last, alpha, planted, random = setup
    directions = torch.stack([planted, random])
    texts = list(range(8))
    encoded = encode_texts(lm, ON + OFF, PREFIX)
    unsteered = text_loglik(lm, encoded)
    zero = steered_loglik(lm, encoded, [LikelihoodRow(0, 0.0, tuple(texts))], directions, last)
    assert np.array_equal(zero[0], unsteered)
    # In a batch beside steered rows, a zero coefficient still adds exactly nothing.
    mixed = steered_loglik(
        lm,
        encoded,
        [LikelihoodRow(0, 0.0, tuple(texts)), LikelihoodRow(1, 3 * alpha, tuple(texts))],
        directions,
        last,
    )
    calm = steered_loglik(
        lm,
        encoded,
        [LikelihoodRow(0, 0.0, tuple(texts)), LikelihoodRow(1, 0.0, tuple(texts))],
        directions,
        last,
    )
    assert np.array_equal(mixed[0], calm[0])
    assert not np.allclose(mixed[1], calm[1])


def test_batch_composition_does_not_change_a_rows_value(setup):
    lm, last, alpha, planted, random = setup
    directions = torch.stack([planted, random])
    encoded = encode_texts(lm, ON + OFF, PREFIX)
    rows = [
        LikelihoodRow(0, 0.5 * alpha, (0, 1, 2, 3, 4)),
        LikelihoodRow(1, -0.7 * alpha, (7, 3, 5)),
        LikelihoodRow(0, -0.2 * alpha, (6, 2)),
    ]
    together = steered_loglik(lm, encoded, rows, directions, last, batch_size=64)
    alone = steered_loglik(lm, encoded, rows, directions, last, batch_size=1)
    tight = steered_loglik(lm, encoded, rows, directions, last, logits_budget=512 * 7)
    for a, b, c in zip(together, alone, tight, strict=True):
        assert a == pytest.approx(b, abs=1e-5) and a == pytest.approx(c, abs=1e-5)
    reordered = steered_loglik(lm, encoded, rows[::-1], directions, last)
    for a, b in zip(together, reordered[::-1], strict=True):
        assert a == pytest.approx(b, abs=1e-5)


def test_a_planted_direction_raises_the_outcome_for_texts_with_its_token(setup):
    """The unembedding row of "dog", added at the last layer, raises log p(dog): texts with
    "dog" gain against the same texts with "cat" (e > 0 at s = +1), and subtracting it
    lowers them (e > 0 at s = -1 too, by the sign convention); a random direction at the
    same coefficient moves the contrast far less."""
    lm, last, alpha, planted, random = setup
    directions = [
        Direction("dog", "planted", planted),
        Direction("dog", "random", random),
    ]
    records = likelihood_outcomes(
        lm,
        last,
        0.5 * alpha,
        {"dog": ON},
        {"dog": OFF},
        directions,
        [-1.0, 0.0, 1.0],
        prefix=PREFIX,
    )
    assert {r["strength"] for r in records} == {-1.0, 1.0}  # s = 0 is the shared baseline
    assert len(records) == 2 * 2 * len(ON)

    def mean_e(arm, s):
        return np.mean([r["e"] for r in records if r["arm"] == arm and r["strength"] == s])

    assert mean_e("planted", 1.0) > 0.1 and mean_e("planted", -1.0) > 0.1
    assert mean_e("planted", 1.0) > 3 * abs(mean_e("random", 1.0))
    planted_up = [r for r in records if r["arm"] == "planted" and r["strength"] == 1.0]
    assert all(r["e"] > 0 for r in planted_up)  # every pair, not only the mean
    # The pair values are the paired difference of the saved log-likelihoods.
    r = planted_up[0]
    assert r["e"] == pytest.approx((r["ll_on"] - r["ll_on_0"]) - (r["ll_off"] - r["ll_off_0"]))


def test_the_outcome_arithmetic():
    on_s, off_s = np.array([-3.0, -4.0]), np.array([-5.0, -5.5])
    on_0, off_0 = np.array([-3.5, -4.0]), np.array([-4.0, -4.5])
    units = pair_effects(on_s, off_s, on_0, off_0, 1.0)
    assert units.tolist() == [1.5, 1.0]
    with pytest.raises(ValueError, match="paired"):
        pair_effects(on_s, off_s[:1], on_0, off_0, 1.0)


def reference_loglik(lm, texts, added: dict[int, torch.Tensor]) -> np.ndarray:
    """Each text alone, unpadded, with plain torch forward hooks adding ``added[n]`` to
    decoder layer n's output at every position: the mean log-softmax of its tokens."""

    def hook(_module, _inputs, output, vector):
        if isinstance(output, tuple):
            return (output[0] + vector, *output[1:])
        return output + vector

    handles = [
        lm.layer(n).register_forward_hook(lambda m, i, o, v=v: hook(m, i, o, v))
        for n, v in added.items()
    ]
    out = []
    try:
        for enc in encode_texts(lm, texts, PREFIX):
            ids = torch.tensor([enc.ids])
            with torch.inference_mode():
                logits = lm.model(input_ids=ids).logits[0].double()
            lp = torch.log_softmax(logits, dim=-1)
            start = len(enc.prefix)
            picked = [float(lp[t - 1, ids[0, t]]) for t in range(start, ids.shape[1])]
            out.append(np.mean(picked))
    finally:
        for h in handles:
            h.remove()
    return np.array(out)


def test_several_layers_score_as_the_sum_of_their_hooks(setup):
    """Per-layer vectors at layers 1 and 3 (each of its own norm), one coefficient: the
    scorer's L_s is what plain forward hooks adding c·v_l at each layer give, L_0 the
    unhooked model's, and no hook is left on the model."""
    lm, _, alpha, planted, random = setup
    layers = (1, 3)
    per_layer = torch.stack([2.0 * random, 0.5 * planted])  # [len(layers), hidden]
    c = 0.4 * alpha
    # transformers' own output-capturing hooks may already sit on the layers: ours must go
    before = [dict(lm.layer(n)._forward_hooks) for n in range(lm.n_layers)]
    records = likelihood_outcomes(
        lm, layers, c, {"dog": ON}, {"dog": OFF}, [Direction("dog", "two", per_layer)],
        [-1.0, 1.0], prefix=PREFIX,
    )  # fmt: skip
    for s in (-1.0, 1.0):
        added = {n: s * c * per_layer[k] for k, n in enumerate(layers)}
        on, off = reference_loglik(lm, ON, added), reference_loglik(lm, OFF, added)
        mine = [r for r in records if r["strength"] == s]
        assert [r["ll_on"] for r in mine] == pytest.approx(on, abs=1e-4)
        assert [r["ll_off"] for r in mine] == pytest.approx(off, abs=1e-4)
    assert [r["ll_on_0"] for r in mine] == pytest.approx(reference_loglik(lm, ON, {}), abs=1e-4)
    assert [dict(lm.layer(n)._forward_hooks) for n in range(lm.n_layers)] == before
    # one layer given as a tuple of one is the one-layer scorer exactly
    one = likelihood_outcomes(
        lm, (3,), c, {"dog": ON}, {"dog": OFF}, [Direction("dog", "p", planted[None])],
        [1.0], prefix=PREFIX,
    )  # fmt: skip
    plain = likelihood_outcomes(
        lm, 3, c, {"dog": ON}, {"dog": OFF}, [Direction("dog", "p", planted)], [1.0],
        prefix=PREFIX,
    )  # fmt: skip
    assert one == plain


def test_the_unsteered_pass_is_scored_once_per_text_set_and_reads_back_bit_for_bit(setup):
    lm, last, alpha, planted, random = setup
    directions = [Direction("dog", "planted", planted), Direction("dog", "random", random)]

    def outcomes(**kwargs):
        return likelihood_outcomes(
            lm, last, 0.5 * alpha, {"dog": ON}, {"dog": OFF}, directions, [-1.0, 1.0],
            prefix=PREFIX, **kwargs,
        )  # fmt: skip

    cache = UnsteeredLoglik()
    first, again = outcomes(unsteered=cache), outcomes(unsteered=cache)
    assert cache.scored == 1
    assert first == again == outcomes()  # no cache: the numbers of before, bit for bit
    encoded = encode_texts(lm, sorted({*ON, *OFF}), PREFIX)
    assert np.array_equal(cache(lm, encoded), text_loglik(lm, encoded))
    assert cache.scored == 1
    cache(lm, encoded[:3])  # another text set is scored on its own
    assert cache.scored == 2
