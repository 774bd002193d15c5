"""steering.vector: the hook's arithmetic, per-row strengths, cleanup and the KV cache."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.activations import layer_output_tensor
from steering.generation import (
    GenerationRow,
    SamplingConfig,
    eos_ids,
    generate_batch,
    suppressed_ids,
)
from steering.vector import MODES, RowSteering, SteeringVector

PROPS = settings(derandomize=True, deadline=None, max_examples=40)
LAYER = 1
PROMPTS = ["tell me about the dog .", "here is a story :", "cat"]


def unit(seed: int, dim: int = 64) -> torch.Tensor:
    v = torch.randn(dim, generator=torch.Generator().manual_seed(seed))
    return v / v.norm()


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def direction():
    return unit(7)


def encode(lm, texts):
    return lm.tokenizer(texts, return_tensors="pt", padding=True)


@torch.inference_mode()
def logits(lm, texts):
    return lm.model(**encode(lm, texts)).logits


@contextmanager
def capture_after(lm, layer):
    """Capture a layer's output as the next layer sees it (after any earlier hook edited it)."""
    store: dict = {}

    def hook(_m, _i, output):
        store["hidden"] = layer_output_tensor(output).detach().clone()

    handle = lm.layer(layer).register_forward_hook(hook)
    try:
        yield store
    finally:
        handle.remove()


@torch.inference_mode()
def layer_output(lm, texts, layer, vector=None, strength=0.0):
    enc = encode(lm, texts)
    if vector is None:
        with capture_after(lm, layer) as store:
            lm.model(**enc, logits_to_keep=1)
        return store["hidden"]
    with vector.apply(lm, strength), capture_after(lm, layer) as store:
        lm.model(**enc, logits_to_keep=1)
    return store["hidden"]


# ---------------------------------------------------------------------------- strength 0


@pytest.mark.parametrize("mode", MODES)
def test_strength_zero_is_bit_identical_to_no_hook(tiny_lm, direction, mode):
    base = logits(tiny_lm, PROMPTS)
    vector = SteeringVector(direction, LAYER, alpha=5.0, mode=mode)
    with vector.apply(tiny_lm, 0.0):
        steered = logits(tiny_lm, PROMPTS)
    assert torch.equal(steered, base)
    with vector.apply(tiny_lm, [0.0, 0.0, 0.0]):
        steered = logits(tiny_lm, PROMPTS)
    assert torch.equal(steered, base)


@pytest.mark.parametrize("mode", MODES)
def test_zero_rows_are_bit_identical_when_other_rows_are_steered(tiny_lm, direction, mode):
    base = logits(tiny_lm, PROMPTS)
    vector = SteeringVector(direction, LAYER, alpha=5.0, mode=mode)
    with vector.apply(tiny_lm, [0.0, 1.5, 0.0]):
        mixed = logits(tiny_lm, PROMPTS)
    assert torch.equal(mixed[0], base[0])
    assert torch.equal(mixed[2], base[2])
    assert not torch.allclose(mixed[1], base[1], atol=1e-3)  # the steered row did move


# ---------------------------------------------------------------------------- cleanup


def test_hook_is_removed_after_an_exception_inside_apply(tiny_lm, direction):
    layer = tiny_lm.layer(LAYER)
    before = dict(layer._forward_hooks)
    assert not any(isinstance(h, RowSteering) for h in before.values())
    vector = SteeringVector(direction, LAYER, alpha=5.0)
    with pytest.raises(RuntimeError, match="boom"), vector.apply(tiny_lm, 1.0) as hook:
        assert isinstance(hook, RowSteering)
        assert any(h is hook for h in layer._forward_hooks.values())
        raise RuntimeError("boom")
    assert dict(layer._forward_hooks) == before
    assert not any(isinstance(h, RowSteering) for h in layer._forward_hooks.values())
    # and the model is unsteered again
    torch.testing.assert_close(logits(tiny_lm, ["cat"]), logits(tiny_lm, ["cat"]))


def test_hook_is_removed_after_a_normal_exit(tiny_lm, direction):
    layer = tiny_lm.layer(LAYER)
    before = dict(layer._forward_hooks)
    base = logits(tiny_lm, ["the dog"])
    with SteeringVector(direction, LAYER, alpha=5.0).apply(tiny_lm, 1.0):
        assert len(layer._forward_hooks) == len(before) + 1
    assert dict(layer._forward_hooks) == before
    assert torch.equal(logits(tiny_lm, ["the dog"]), base)


# ---------------------------------------------------------------------------- RowSteering


def test_row_steering_handles_tensor_and_tuple_outputs(direction):
    hook = RowSteering(direction, torch.tensor([2.0]), "additive")
    hidden = torch.zeros(1, 3, 64)
    out = hook(None, (), hidden)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, (2.0 * direction).expand(1, 3, 64))

    extra = object()
    out = hook(None, (), (hidden, extra, "cache"))
    assert isinstance(out, tuple)
    assert len(out) == 3
    assert out[1] is extra
    assert out[2] == "cache"
    torch.testing.assert_close(out[0], (2.0 * direction).expand(1, 3, 64))


def test_inactive_row_steering_returns_the_output_object_itself(direction):
    hook = RowSteering(direction, torch.zeros(3), "projection")
    hidden = torch.randn(3, 2, 64)
    assert hook.inactive
    assert hook(None, (), hidden) is hidden
    packed = (hidden, None)
    assert hook(None, (), packed) is packed


def test_row_steering_rejects_unknown_mode_and_wrong_row_count(direction):
    with pytest.raises(ValueError, match="unknown steering mode 'subtract'"):
        RowSteering(direction, torch.ones(1), "subtract")  # type: ignore[arg-type]
    hook = RowSteering(direction, torch.ones(3), "additive")
    with pytest.raises(ValueError, match="set up for 3 rows but the batch has 2"):
        hook.edit(torch.zeros(2, 4, 64))


@PROPS
@given(
    seed=st.integers(0, 10_000),
    coefficients=st.lists(st.floats(-10, 10), min_size=1, max_size=4),
)
def test_row_steering_additive_and_projection_algebra(seed, coefficients):
    """Per-row additive adds c_i·v_i; projection maps h·v to (1 + c_i)(h·v), leaving h⊥ alone."""
    rows = len(coefficients)
    g = torch.Generator().manual_seed(seed)
    dirs = torch.randn(rows, 16, generator=g, dtype=torch.float64)
    dirs = dirs / dirs.norm(dim=1, keepdim=True)
    hidden = torch.randn(rows, 5, 16, generator=g, dtype=torch.float64)
    c = torch.tensor(coefficients, dtype=torch.float64)

    added = RowSteering(dirs, c, "additive").edit(hidden)
    torch.testing.assert_close(
        added - hidden, c[:, None, None] * dirs[:, None, :].expand_as(hidden)
    )

    projected = RowSteering(dirs, c, "projection").edit(hidden)
    along = (hidden * dirs[:, None, :]).sum(-1)
    along_after = (projected * dirs[:, None, :]).sum(-1)
    torch.testing.assert_close(along_after, (1 + c[:, None]) * along)
    perp = hidden - along[..., None] * dirs[:, None, :]
    perp_after = projected - along_after[..., None] * dirs[:, None, :]
    torch.testing.assert_close(perp_after, perp)


# ---------------------------------------------------------------------------- in the model


@pytest.mark.parametrize("strength", [1.0, -0.5, 2.0])
def test_additive_edit_adds_exactly_s_beta_alpha_v(tiny_lm, direction, strength):
    vector = SteeringVector(direction, LAYER, alpha=7.0, beta=0.2)
    base = layer_output(tiny_lm, PROMPTS, LAYER)
    steered = layer_output(tiny_lm, PROMPTS, LAYER, vector, strength)
    expected = (strength * 0.2 * 7.0 * direction).expand_as(base)
    # every position, BOS and padding included, moves by the same vector
    torch.testing.assert_close(steered - base, expected, atol=1e-5, rtol=1e-5)


def test_projection_plus_amplifies_and_minus_one_removes_the_component(tiny_lm, direction):
    """Projection mode is h + s·(h·v)·v: s > 0 scales the component along v by (1 + s),
    s = -1 removes it, and the sign of v does not matter (it cannot tell v from -v)."""
    base = layer_output(tiny_lm, PROMPTS, LAYER)
    along = base @ direction
    assert along.abs().max() > 0.1  # the component exists to be amplified

    amplified = layer_output(
        tiny_lm, PROMPTS, LAYER, SteeringVector(direction, LAYER, mode="projection"), 1.0
    )
    torch.testing.assert_close(amplified @ direction, 2 * along, atol=1e-5, rtol=1e-5)
    assert ((amplified @ direction).abs() >= along.abs()).all()

    removed = layer_output(
        tiny_lm, PROMPTS, LAYER, SteeringVector(direction, LAYER, mode="projection"), -1.0
    )
    torch.testing.assert_close(removed @ direction, torch.zeros_like(along), atol=1e-5, rtol=0)
    perp = base - along[..., None] * direction
    torch.testing.assert_close(removed, perp, atol=1e-5, rtol=1e-5)

    flipped = layer_output(
        tiny_lm, PROMPTS, LAYER, SteeringVector(-direction, LAYER, mode="projection"), 1.0
    )
    torch.testing.assert_close(flipped, amplified, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_per_row_strengths_match_single_row_runs(tiny_lm, direction, mode):
    strengths = [1.5, -1.0, 0.5]
    vector = SteeringVector(direction, LAYER, alpha=4.0, mode=mode)
    with vector.apply(tiny_lm, strengths):
        batch = logits(tiny_lm, PROMPTS)[:, -1]
    singles = []
    for prompt, s in zip(PROMPTS, strengths, strict=True):
        with vector.apply(tiny_lm, s):
            singles.append(logits(tiny_lm, [prompt])[0, -1])
    torch.testing.assert_close(batch, torch.stack(singles), atol=1e-4, rtol=1e-4)
    # the rows really differ in strength: the same prompt at another strength differs
    with vector.apply(tiny_lm, 0.0):
        unsteered = logits(tiny_lm, [PROMPTS[0]])[0, -1]
    assert not torch.allclose(singles[0], unsteered, atol=1e-3)


# ---------------------------------------------------------------------------- SteeringVector


def test_steering_vector_rejects_non_unit_directions_and_unknown_modes():
    with pytest.raises(ValueError, match=r"unit-norm, got norm 2\.0000"):
        SteeringVector(2 * unit(1), LAYER)
    with pytest.raises(ValueError, match="unit-norm"):
        SteeringVector(torch.zeros(64), LAYER)
    with pytest.raises(ValueError, match="unknown steering mode 'ablate'"):
        SteeringVector(unit(1), LAYER, mode="ablate")  # type: ignore[arg-type]
    SteeringVector(unit(1) * (1 + 5e-4), LAYER)  # within the 1e-3 tolerance


def test_from_direction_normalises_and_keeps_the_sign():
    raw = 3.0 * unit(2)
    vector = SteeringVector.from_direction(raw, 1, alpha=2.0)
    assert float(vector.direction.norm()) == pytest.approx(1.0, abs=1e-6)
    assert float(vector.direction @ raw) > 0
    assert vector.direction.dtype == torch.float32


def test_coefficients_per_mode():
    additive = SteeringVector(unit(3), 1, alpha=50.0, beta=0.2)
    torch.testing.assert_close(
        additive.coefficients([-1.0, 0.0, 0.5]), torch.tensor([-10.0, 0.0, 5.0])
    )
    torch.testing.assert_close(additive.coefficients(1.0), torch.tensor([10.0]))
    projection = SteeringVector(unit(3), 1, alpha=50.0, beta=0.2, mode="projection")
    torch.testing.assert_close(projection.coefficients([-1.0, 2.0]), torch.tensor([-1.0, 2.0]))


# ---------------------------------------------------------------------------- KV cache


@torch.inference_mode()
def reference_greedy(lm, prompt, direction, coefficient, mode, steps, prompt_only=False):
    """Greedy decoding that recomputes the whole sequence every step (no KV cache).

    Returns the new tokens and their log-probabilities. With ``prompt_only`` the hook
    acts on the prompt positions alone: what a generator that forgot to steer the
    cached steps would produce.
    """
    ids = lm.tokenizer(prompt, return_tensors="pt")["input_ids"]
    n_prompt = ids.shape[1]
    stops = set(eos_ids(lm))
    banned = torch.tensor(suppressed_ids(lm), dtype=torch.long)  # pad, BOS, unk: never sampled
    new: list[int] = []
    logprobs: list[float] = []
    direction = direction[None, :]
    for _ in range(steps):
        if prompt_only:  # steer positions < n_prompt only
            mask = torch.zeros(1, ids.shape[1], 1)
            mask[:, :n_prompt] = 1.0
            hook = RowSteering(direction, torch.tensor([coefficient]), mode)
            handle = lm.layer(LAYER).register_forward_hook(
                lambda _m, _i, o, hook=hook, mask=mask: o + mask * (hook.edit(o) - o)
            )
        else:
            handle = lm.layer(LAYER).register_forward_hook(
                RowSteering(direction, torch.tensor([coefficient]), mode)
            )
        try:
            logp = torch.log_softmax(lm.model(input_ids=ids).logits[0, -1], dim=-1)
        finally:
            handle.remove()
        nxt = int(logp.index_fill(0, banned, float("-inf")).argmax())
        if nxt in stops:
            break
        new.append(nxt)
        logprobs.append(float(logp[nxt]))
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return new, logprobs


@pytest.mark.parametrize("mode", MODES)
def test_steering_applies_to_every_token_under_the_kv_cache(tiny_lm, mode):
    """Greedy ``generate_batch`` (KV cache, left padding, per-row coefficients) equals a
    no-cache loop that steers the full sequence at every step, tokens and log-probs."""
    steps = 8
    dirs = torch.stack([unit(11), unit(12)])
    coef = 6.0 if mode == "additive" else 4.0
    rows = [
        GenerationRow("a", PROMPTS[0], seed=1, direction=0, coefficient=coef),
        GenerationRow("b", PROMPTS[1], seed=2, direction=1, coefficient=-coef),
        GenerationRow("c", PROMPTS[2], seed=3, direction=1, coefficient=coef),
    ]
    sampling = SamplingConfig(max_new_tokens=steps, greedy=True)
    gens, _ = generate_batch(tiny_lm, rows, dirs, LAYER, mode, sampling)
    for row, gen in zip(rows, gens, strict=True):
        tokens, logprobs = reference_greedy(
            tiny_lm, row.prompt, dirs[row.direction], row.coefficient, mode, steps
        )
        assert gen.token_ids == tokens, row.key
        assert gen.logprobs == pytest.approx(logprobs, abs=1e-4), row.key

    # the comparison has teeth: steering only the prompt gives other numbers
    row = rows[0]
    tokens, logprobs = reference_greedy(
        tiny_lm, row.prompt, dirs[row.direction], row.coefficient, mode, steps, prompt_only=True
    )
    assert gens[0].logprobs != pytest.approx(logprobs, abs=1e-3)
