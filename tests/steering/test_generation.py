"""steering.generation: seeded per-row sampling, the top-k prefilter, EOS, and NLL."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.generation import (
    TOPK_PREFILTER,
    BatchStats,
    GenerationRow,
    SamplingConfig,
    continuation_nll,
    eos_ids,
    generate_batch,
    sample_next,
    suppressed_ids,
)
from steering.sampling import (
    TOPK_CHUNK,
    WIDE_CHUNK,
    candidate_topk,
    chunk_maxima,
    inverse_cdf_pick,
    narrowing_chunk,
    nucleus_pick,
)
from steering.scratch import Scratch

PROPS = settings(derandomize=True, deadline=None, max_examples=150)
LAYER = 1
PROMPTS = ["tell me about the dog .", "here is a story :", "cat", "a big old tree in the city"]
SAMPLED = SamplingConfig(max_new_tokens=10, temperature=1.0, top_p=0.95)
GREEDY = SamplingConfig(max_new_tokens=10, greedy=True)


pytestmark = pytest.mark.usefixtures("one_thread")


def rows_for(prompts, seeds, coefficient=0.0):
    return [
        GenerationRow(f"r{i}", p, seed=s, direction=i % 2, coefficient=coefficient)
        for i, (p, s) in enumerate(zip(prompts, seeds, strict=True))
    ]


def run(lm, rows, directions, sampling, mode="additive"):
    gens, stats = generate_batch(lm, rows, directions, LAYER, mode, sampling)
    return gens, stats


# ---------------------------------------------------------------------------- determinism


def test_same_rows_and_seeds_give_identical_tokens(tiny_lm, directions):
    rows = rows_for(PROMPTS, [1, 2, 3, 4], coefficient=2.0)
    first, _ = run(tiny_lm, rows, directions, SAMPLED)
    second, _ = run(tiny_lm, rows, directions, SAMPLED)
    assert [g.token_ids for g in first] == [g.token_ids for g in second]
    assert [g.logprobs for g in first] == [g.logprobs for g in second]
    assert [g.text for g in first] == [g.text for g in second]
    # and the seed matters: other seeds give other samples
    other, _ = run(tiny_lm, rows_for(PROMPTS, [11, 12, 13, 14], 2.0), directions, SAMPLED)
    assert [g.token_ids for g in other] != [g.token_ids for g in first]


def test_rows_sharing_a_seed_share_their_random_numbers(tiny_lm, directions):
    """Common random numbers: same prompt, same seed, same strength -> same sample."""
    rows = [
        GenerationRow("a", "cat", seed=9),
        GenerationRow("b", "tell me about the dog .", seed=9),
        GenerationRow("c", "cat", seed=9),
        GenerationRow("d", "cat", seed=10),
    ]
    gens, _ = run(tiny_lm, rows, directions, SAMPLED)
    assert gens[0].token_ids == gens[2].token_ids
    assert gens[0].token_ids != gens[3].token_ids


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_a_row_does_not_depend_on_the_other_rows(tiny_lm, directions, sampling):
    rows = [
        GenerationRow("a", PROMPTS[0], seed=21, direction=0, coefficient=3.0),
        GenerationRow("b", PROMPTS[1], seed=22, direction=1, coefficient=-3.0),
        GenerationRow("c", PROMPTS[2], seed=23, direction=0, coefficient=0.0),
        GenerationRow("d", PROMPTS[3], seed=24, direction=1, coefficient=1.0),
    ]
    lengths = {len(tiny_lm.tokenizer(r.prompt)["input_ids"]) for r in rows}
    assert len(lengths) > 1  # the batch is left-padded
    batch, _ = run(tiny_lm, rows, directions, sampling)
    for row, gen in zip(rows, batch, strict=True):
        alone, _ = run(tiny_lm, [row], directions, sampling)
        assert gen.token_ids == alone[0].token_ids, row.key
        assert gen.logprobs == pytest.approx(alone[0].logprobs, abs=1e-4), row.key
    # in a different order, too
    reordered, _ = run(tiny_lm, rows[::-1], directions, sampling)
    assert [g.token_ids for g in reordered[::-1]] == [g.token_ids for g in batch]


def test_log_probs_only_for_the_rows_that_ask(tiny_lm, directions):
    """Rows not asked get none; asked rows get exactly the log-probs of a run where every
    row has them, and no row's tokens change."""
    rows = rows_for(PROMPTS, [31, 32, 33, 34], coefficient=2.0)
    every, _ = run(tiny_lm, rows, directions, SAMPLED)
    asked = [True, False, False, True]
    some, _ = generate_batch(
        tiny_lm, rows, directions, LAYER, "additive", SAMPLED, logprobs_for=asked
    )
    assert [g.token_ids for g in some] == [g.token_ids for g in every]
    for want, a, b in zip(asked, some, every, strict=True):
        assert a.logprobs == (b.logprobs if want else [])
    assert any(g.logprobs for g in some)
    with pytest.raises(ValueError, match="logprobs_for has 2 entries for 4 rows"):
        generate_batch(
            tiny_lm, rows, directions, LAYER, "additive", SAMPLED, logprobs_for=[True, False]
        )


# ---------------------------------------------------------------------------- sample_next


@st.composite
def logit_cases(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rows = draw(st.integers(1, 4))
    vocab = draw(st.integers(2, 400))
    # flat (the nucleus is wider than the prefilter) to peaked (a few tokens)
    scale = draw(st.sampled_from([0.01, 0.3, 1.0, 3.0, 10.0, 30.0]))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * scale
    u = torch.rand(rows, generator=g)
    temperature = draw(st.floats(0.2, 2.0))
    top_p = draw(st.floats(0.01, 1.0))
    k = draw(st.integers(1, vocab))
    return logits, u, SamplingConfig(temperature=temperature, top_p=top_p), k


@PROPS
@given(logit_cases())
def test_prefilter_picks_the_same_token_as_the_full_sort(case):
    """Same token for the same uniform, up to exact ties: topk and sort may order tokens
    of identical probability differently (a fuzz of 80,000 rows found only such cases)."""
    logits, u, sampling, k = case
    probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
    full = sample_next(logits, u, sampling, None)
    for prefilter in (k, TOPK_PREFILTER):
        picked = sample_next(logits, u, sampling, prefilter)
        for row in torch.nonzero(picked != full)[:, 0].tolist():
            assert probs[row, picked[row]] == probs[row, full[row]], "not a tie"


@PROPS
@given(logit_cases())
def test_a_reused_scratch_picks_the_same_tokens_as_fresh_tensors(case):
    """Scratch only changes where the probabilities live: same tokens, step after step,
    also when a later step needs more or fewer rows than the one before."""
    logits, u, sampling, k = case
    scratch = Scratch()
    for rows in (logits.shape[0], 1, logits.shape[0]):
        fresh = sample_next(logits[:rows], u[:rows], sampling, k)
        assert torch.equal(sample_next(logits[:rows], u[:rows], sampling, k, scratch), fresh)


@st.composite
def chunked_cases(draw):
    """Vocabularies the chunked top-k runs on (multiples of its chunk), logits with and
    without many exact ties (rounded to a coarse grid)."""
    seed = draw(st.integers(0, 2**31 - 1))
    rows = draw(st.integers(1, 6))
    vocab = TOPK_CHUNK * draw(st.integers(8, 160))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * draw(st.sampled_from([0.3, 1.0, 3.0, 10.0]))
    if draw(st.booleans()):
        logits = logits.mul(2).round().div(2)  # ties everywhere, as unused tokens share a logit
    k = draw(st.integers(1, vocab // TOPK_CHUNK // 2))
    u = torch.rand(rows, generator=g)
    return logits, u, SamplingConfig(top_p=draw(st.floats(0.05, 1.0))), k


def _topk_pick(probs, u, top_p, k):
    """The pick as it was before the chunked top-k: torch.topk's own order."""
    if k >= probs.shape[-1]:
        full_probs, full_idx = probs.sort(dim=-1, descending=True)
        return full_idx.gather(1, inverse_cdf_pick(full_probs, top_p, u)[:, None])[:, 0]
    top_probs, top_idx = probs.topk(k, dim=-1)
    choice = top_idx.gather(1, inverse_cdf_pick(top_probs, top_p, u)[:, None])[:, 0]
    short = torch.nonzero(top_probs.sum(dim=-1) < top_p)[:, 0]
    if len(short):
        choice[short] = _topk_pick(probs[short], u[short], top_p, k * 4)
    return choice


@PROPS
@given(chunked_cases())
def test_the_chunked_top_k_picks_torch_topk_s_token_bit_for_bit(case):
    """The chunked top-k finds topk's values exactly, and with the tie fallback the pick
    is topk's own token, ties included."""
    logits, u, sampling, k = case
    probs = torch.softmax(logits, dim=-1)
    values, indices = candidate_topk(probs, k)
    assert torch.equal(values, probs.topk(k, dim=-1).values)
    assert torch.equal(probs.gather(1, indices), values)
    picked = nucleus_pick(probs, u, sampling.top_p, k, Scratch())
    assert torch.equal(picked, _topk_pick(probs, u, sampling.top_p, k))
    # some of the rows, reading the maxima every row's search already has
    rows = torch.arange(probs.shape[0] - 1, -1, -2)
    values, indices = candidate_topk(probs, k, rows, chunk_maxima(probs)[rows])
    assert torch.equal(values, probs[rows].topk(k, dim=-1).values)
    assert torch.equal(probs[rows].gather(1, indices), values)


@st.composite
def widening_cases(draw):
    """Rows whose nuclei are a few dozen dominant tokens: some fit the first k, the
    others widen to 4k, which the chunks still narrow (the rows' maxima reused)."""
    seed = draw(st.integers(0, 2**31 - 1))
    rows = draw(st.integers(2, 6))
    vocab = TOPK_CHUNK * 256
    k = draw(st.integers(1, 24))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 0.1
    for row in range(rows):
        dominant = draw(st.integers(1, 4 * k))
        logits[row, torch.randperm(vocab, generator=g)[:dominant]] += 10.0
    if draw(st.booleans()):
        logits = logits.mul(4).round().div(4)  # ties among the dominant tokens
    return logits, torch.rand(rows, generator=g), draw(st.floats(0.5, 0.99)), k


@PROPS
@given(widening_cases())
def test_rows_that_widen_reuse_their_chunk_maxima_and_pick_topk_s_token(case):
    logits, u, top_p, k = case
    probs = torch.softmax(logits, dim=-1)
    picked = nucleus_pick(probs, u, top_p, k, Scratch(), maxima=chunk_maxima(probs))
    assert torch.equal(picked, _topk_pick(probs, u, top_p, k))


@st.composite
def wide_cases(draw):
    """A k too wide for chunks of 32 to narrow, but not for chunks of 8: near-flat rows
    (ties or not) whose nuclei need hundreds of tokens, some more than k."""
    seed = draw(st.integers(0, 2**31 - 1))
    vocab = TOPK_CHUNK * 256
    k = draw(st.integers(vocab // TOPK_CHUNK // 2, vocab // WIDE_CHUNK // 2 - 1))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(draw(st.integers(1, 5)), vocab, generator=g) * draw(
        st.sampled_from([0.5, 2.0, 4.0])
    )
    if draw(st.booleans()):
        logits = logits.mul(2).round().div(2)
    return logits, torch.rand(logits.shape[0], generator=g), draw(st.floats(0.3, 0.99)), k


@PROPS
@given(wide_cases())
def test_a_top_k_too_wide_for_chunks_of_32_narrows_through_chunks_of_8(case):
    logits, u, top_p, k = case
    probs = torch.softmax(logits, dim=-1)
    assert narrowing_chunk(probs, k + 1) == WIDE_CHUNK
    values, indices = candidate_topk(probs, k + 1, chunk=WIDE_CHUNK)
    assert torch.equal(values, probs.topk(k + 1, dim=-1).values)
    assert torch.equal(probs.gather(1, indices), values)
    unordered, at = candidate_topk(probs, k + 1, chunk=WIDE_CHUNK, ordered=False)
    assert torch.equal(unordered.sort(dim=-1, descending=True).values, values)
    assert torch.equal(probs.gather(1, at), unordered)
    assert torch.equal(nucleus_pick(probs, u, top_p, k, Scratch()), _topk_pick(probs, u, top_p, k))


def test_scratch_reuses_one_tensor_per_name_and_grows_when_needed():
    like = torch.zeros(1, 7)
    scratch = Scratch()
    first = scratch.take("probs", (4, 7), like)
    assert first.shape == (4, 7)
    assert scratch.take("probs", (3, 7), like).data_ptr() == first.data_ptr()
    assert scratch.take("other", (3, 7), like).data_ptr() != first.data_ptr()
    grown = scratch.take("probs", (9, 7), like)
    assert grown.shape == (9, 7)
    assert scratch.take("probs", (2, 7), like.double()).dtype == torch.float64
    assert scratch.take("probs", (2, 5), like).shape == (2, 5)


def test_prefilter_fallback_is_exercised_when_the_nucleus_is_wider_than_k():
    """A near-flat distribution over 400 tokens: top-5 holds ~1.25% of the mass, the
    nucleus 95%. (Distinct values: with exact ties topk and sort may order tied tokens
    differently, which changes the token but not the distribution.)"""
    logits = torch.linspace(0.0, 0.01, 400).expand(3, 400).clone()
    u = torch.tensor([0.1, 0.5, 0.99])
    sampling = SamplingConfig(top_p=0.95)
    picked = sample_next(logits, u, sampling, 5)
    assert torch.equal(picked, sample_next(logits, u, sampling, None))
    # the inverse CDF spreads over the nucleus, beyond the top 5 (the top 5 are ids 395..399)
    assert int(picked.min()) < 395


@PROPS
@given(logit_cases())
def test_the_chosen_token_is_inside_the_top_p_nucleus(case):
    logits, u, sampling, k = case
    probs = torch.softmax(logits.double() / sampling.temperature, dim=-1)
    for prefilter in (None, k):
        chosen = sample_next(logits, u, sampling, prefilter)
        for row in range(logits.shape[0]):
            p = probs[row]
            token = int(chosen[row])
            assert p[token] > 0
            mass_before = float(p[p > p[token]].sum())  # tokens ranked above the choice
            assert mass_before < sampling.top_p + 1e-5


@PROPS
@given(logit_cases())
def test_extreme_uniforms_pick_the_ends_of_the_nucleus(case):
    logits, _, sampling, k = case
    rows = logits.shape[0]
    top = logits.argmax(dim=-1)
    low = sample_next(logits, torch.zeros(rows), sampling, k)
    assert torch.equal(low, top)
    narrow = SamplingConfig(temperature=sampling.temperature, top_p=1e-6)
    assert torch.equal(sample_next(logits, torch.full((rows,), 0.999), narrow, k), top)


@PROPS
@given(logit_cases())
def test_greedy_is_argmax(case):
    logits, u, _, k = case
    greedy = SamplingConfig(greedy=True)
    assert torch.equal(sample_next(logits, u, greedy, k), logits.argmax(dim=-1))


def test_uniform_sweeps_tokens_in_probability_order():
    """Inverse CDF: u below the first token's share picks it, and so on down the list."""
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    sampling = SamplingConfig(top_p=0.9)  # nucleus = first three tokens (mass 0.95)
    picks = [
        int(sample_next(logits, torch.tensor([u]), sampling, None)[0])
        for u in (0.0, 0.5, 0.53, 0.84, 0.85, 0.999)
    ]
    # kept mass 0.95: boundaries at 0.5/0.95 = 0.526 and 0.8/0.95 = 0.842
    assert picks == [0, 0, 1, 1, 2, 2]


# ---------------------------------------------------------------------------- EOS and stripping


def test_eos_ids_of_the_tiny_model(tiny_lm):
    assert eos_ids(tiny_lm) == [1]


def test_prompt_is_stripped_by_token_count(tiny_lm, directions):
    rows = rows_for(PROMPTS[:2], [1, 2])
    gens, stats = run(tiny_lm, rows, directions, GREEDY)
    for row, gen in zip(rows, gens, strict=True):
        prompt_ids = tiny_lm.tokenizer(row.prompt)["input_ids"]
        assert gen.n_prompt_tokens == len(prompt_ids)
        assert gen.n_new_tokens == len(gen.token_ids) == GREEDY.max_new_tokens
        assert not gen.stopped_at_eos
        assert gen.text == tiny_lm.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        assert len(gen.logprobs) == len(gen.token_ids)
        assert all(lp <= 0 for lp in gen.logprobs)
        assert gen.prompt == row.prompt
        assert gen.key == row.key
    # greedy continuation equals argmax of a plain forward at the first step
    with torch.inference_mode():
        first = tiny_lm.model(**tiny_lm.tokenizer([PROMPTS[0]], return_tensors="pt")).logits
    assert gens[0].token_ids[0] == int(first[0, -1].argmax())
    assert stats.rows == 2
    assert stats.new_tokens == 2 * GREEDY.max_new_tokens


class ForceToken:
    """A forward hook on the output head: makes ``token`` overwhelmingly likely for chosen
    rows at one step (or at every step when ``at_step`` is None)."""

    def __init__(self, token: int, at_step: int | None, rows: list[int]) -> None:
        self.token, self.at_step, self.rows, self.calls = token, at_step, rows, 0

    def __call__(self, _module, _inputs, output):
        if self.at_step is None or self.calls == self.at_step:
            output = output.clone()
            output[self.rows, -1, self.token] = 1e4
        self.calls += 1
        return output


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_eos_stops_a_row_and_is_not_part_of_the_text(tiny_lm, directions, sampling):
    rows = rows_for(PROMPTS[:2], [1, 2])
    free, _ = run(tiny_lm, rows, directions, sampling)
    force = ForceToken(1, at_step=3, rows=[0])
    handle = tiny_lm.model.lm_head.register_forward_hook(force)
    try:
        gens, stats = run(tiny_lm, rows, directions, sampling)
    finally:
        handle.remove()
    stopped, running = gens
    assert stopped.stopped_at_eos
    assert stopped.token_ids == free[0].token_ids[:3]  # EOS itself is dropped
    assert 1 not in stopped.token_ids
    assert stopped.text == tiny_lm.tokenizer.decode(free[0].token_ids[:3])
    assert len(stopped.logprobs) == 3
    # the other row runs on, unaffected
    assert not running.stopped_at_eos
    assert running.token_ids == free[1].token_ids
    assert stats.new_tokens == 3 + sampling.max_new_tokens
    assert force.calls == sampling.max_new_tokens


def test_generation_ends_early_once_every_row_has_stopped(tiny_lm, directions):
    force = ForceToken(1, at_step=2, rows=[0, 1])
    handle = tiny_lm.model.lm_head.register_forward_hook(force)
    try:
        gens, stats = run(tiny_lm, rows_for(PROMPTS[:2], [1, 2]), directions, GREEDY)
    finally:
        handle.remove()
    assert force.calls == 3  # three forward passes, not max_new_tokens
    assert all(g.stopped_at_eos and g.n_new_tokens == 2 for g in gens)
    assert stats.new_tokens == 4


def test_eos_at_the_first_step_gives_empty_text(tiny_lm, directions):
    force = ForceToken(1, at_step=0, rows=[0])
    handle = tiny_lm.model.lm_head.register_forward_hook(force)
    try:
        gens, _ = run(tiny_lm, rows_for(PROMPTS[:1], [1]), directions, GREEDY)
    finally:
        handle.remove()
    assert gens[0].token_ids == []
    assert gens[0].text == ""
    assert gens[0].stopped_at_eos


def test_suppressed_ids_of_the_tiny_model(tiny_lm):
    tok = tiny_lm.tokenizer
    assert suppressed_ids(tiny_lm) == sorted([tok.pad_token_id, tok.bos_token_id, tok.unk_token_id])
    assert not set(suppressed_ids(tiny_lm)) & set(eos_ids(tiny_lm))


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_pad_bos_and_unk_are_never_generated(tiny_lm, directions, sampling):
    """Even when the model puts nearly all its mass on them, at every step."""
    rows = rows_for(PROMPTS[:3], [1, 2, 3])
    hooks = [
        tiny_lm.model.lm_head.register_forward_hook(ForceToken(token, None, [i]))
        for i, token in enumerate(suppressed_ids(tiny_lm))
    ]
    try:
        gens, _ = run(tiny_lm, rows, directions, sampling)
    finally:
        for hook in hooks:
            hook.remove()
    banned = set(suppressed_ids(tiny_lm))
    for gen in gens:
        assert len(gen.token_ids) == sampling.max_new_tokens
        assert not banned & set(gen.token_ids)


def test_batch_stats_add():
    total = BatchStats()
    total.add(BatchStats(2, 10, 0.5))
    total.add(BatchStats(3, 5, 1.0))
    assert (total.rows, total.new_tokens, total.seconds) == (5, 15, 1.5)
    assert total.tokens_per_second == pytest.approx(10.0)
    assert BatchStats().tokens_per_second == 0.0


# ---------------------------------------------------------------------------- continuation NLL


def manual_nll(lm, prompt, continuation):
    ids = lm.tokenizer(prompt)["input_ids"] + list(continuation)
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0].double()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    n = len(continuation)
    targets = torch.tensor(ids[1:])[-n:]
    return float(-logp[-n:].gather(1, targets[:, None]).mean())


def test_continuation_nll_equals_a_manual_computation(tiny_lm):
    tok = tiny_lm.tokenizer
    prompts = ["the dog is", "cat", "here is a story :", "tell me"]
    continuations = [
        tok("red and happy", add_special_tokens=False)["input_ids"],
        [300, 17, 490, 5, 6, 7, 8],  # any token ids, also ones the tokenizer never emits
        [],
        tok("about the sea", add_special_tokens=False)["input_ids"],
    ]
    got = continuation_nll(tiny_lm, prompts, continuations)
    assert got[2] is None
    for i in (0, 1, 3):
        assert got[i] == pytest.approx(manual_nll(tiny_lm, prompts[i], continuations[i]), abs=1e-4)
        assert math.isfinite(got[i]) and got[i] > 0
    # batching does not change the numbers
    one_by_one = continuation_nll(tiny_lm, prompts, continuations, batch_size=1)
    assert one_by_one[2] is None
    for i in (0, 1, 3):
        assert one_by_one[i] == pytest.approx(got[i], abs=1e-4)


def test_continuation_nll_is_the_same_through_the_blocked_head_and_the_logits(tiny_lm):
    """The CPU's block-by-block path (hidden states through the head in blocks) and the
    materialised-logits path (a single-product head) give the same NLLs up to rounding."""
    tok = tiny_lm.tokenizer
    prompts = ["the dog is", "cat", "here is a story :", "tell me", "a"]
    continuations = [
        tok("red and happy", add_special_tokens=False)["input_ids"],
        [300, 17, 490, 5, 6, 7, 8],
        tok("about the sea and the sky", add_special_tokens=False)["input_ids"],
        [],
        [tiny_lm.model.get_output_embeddings().out_features - 1, 2, 100],  # the last token
    ]
    blocked = continuation_nll(tiny_lm, prompts, continuations)
    head = tiny_lm.model.get_output_embeddings()
    block, head.block = head.block, 0
    try:
        materialised = continuation_nll(tiny_lm, prompts, continuations)
    finally:
        head.block = block
    assert blocked[3] is None and materialised[3] is None
    for i in (0, 1, 2, 4):
        assert blocked[i] == pytest.approx(materialised[i], abs=1e-5)
        manual = manual_nll(tiny_lm, prompts[i], continuations[i])
        assert blocked[i] == pytest.approx(manual, abs=1e-4)


def test_continuation_nll_of_generated_tokens_matches_their_logprobs(tiny_lm, directions):
    """Unsteered greedy: the mean of the generation's own log-probs is minus its NLL."""
    rows = rows_for(PROMPTS[:2], [1, 2])
    gens, _ = run(tiny_lm, rows, directions, GREEDY)
    nll = continuation_nll(tiny_lm, [g.prompt for g in gens], [g.token_ids for g in gens])
    for gen, value in zip(gens, nll, strict=True):
        assert value == pytest.approx(-sum(gen.logprobs) / len(gen.logprobs), abs=1e-4)


def test_continuation_nll_all_empty(tiny_lm):
    assert continuation_nll(tiny_lm, ["cat", "the dog"], [[], []]) == [None, None]
