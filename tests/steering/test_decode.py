"""steering.decode / decode_cuda / policies: every decode policy against the reference.

The reference decodes with the model's own cache, the single-product head and a stable
full sort. The CPU policy must pick the same tokens (its top-k prefilter differs from a
sort only on exact ties) with the same log-probs bit for bit; the CUDA policy's static
cache attends over a wider, masked cache, so its log-probs may move in the last bits
(about 5e-7 here) and its tokens must still match on these models: a tiny random
Gemma 3 and a tiny random Llama (SmolLM2's architecture), issue 37. Its graph-free
variant runs here; the graph capture runs in the tests marked ``cuda``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from steering.decode import CpuPolicy, DecodeState, ReferencePolicy
from steering.decode_cuda import (
    CAPACITY_QUANTUM,
    EOS_EVERY,
    CudaPolicy,
    row_bucket,
    static_capacity,
)
from steering.decode_kernels import FUSED, NATIVE
from steering.generation import GenerationRow, SamplingConfig, generate_batch, suppressed_ids
from steering.head import BlockedHead, single_product
from steering.policies import POLICIES, decode_description, make_policy, policy_for
from steering.sampling import sample_next, sorted_pick

PROPS = settings(derandomize=True, deadline=None, max_examples=100)
LAYER = 1
PROMPTS = ["tell me about the dog .", "here is a story :", "cat", "a big old tree in the city"]
GREEDY = SamplingConfig(max_new_tokens=10, greedy=True)
SAMPLED = SamplingConfig(max_new_tokens=10, temperature=1.0, top_p=0.95)
HOT = SamplingConfig(max_new_tokens=10, temperature=0.7, top_p=0.8)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(params=["gemma3", "llama"])
def arch_lm(request):
    """The tiny random model of each architecture the policies are held to: Gemma 3
    (sliding-window layers) and Llama (SmolLM2's: full attention only, tied head)."""
    return request.getfixturevalue({"gemma3": "tiny_lm", "llama": "tiny_llama_lm"}[request.param])


def grid(n=7, coefficients=(0.0, 3.0, -3.0)):
    """Rows of mixed prompt lengths (left padding), directions and strengths."""
    return [
        GenerationRow(
            f"r{i}", PROMPTS[i % 4], seed=40 + i, direction=i % 2, coefficient=coefficients[i % 3]
        )
        for i in range(n)
    ]


def decode(lm, rows, directions, sampling, policy, mode="additive", **kw):
    gens, stats = generate_batch(lm, rows, directions, LAYER, mode, sampling, policy=policy, **kw)
    return gens, stats


def assert_same(gens, ref, logprob_tol):
    for got, want in zip(gens, ref, strict=True):
        assert got.token_ids == want.token_ids, got.key
        assert got.stopped_at_eos == want.stopped_at_eos, got.key
        assert got.text == want.text
        if logprob_tol == 0:
            assert got.logprobs == want.logprobs, got.key
        else:
            assert got.logprobs == pytest.approx(want.logprobs, abs=logprob_tol), got.key


# ---------------------------------------------------------------------------- the choice


def test_each_device_gets_its_policy_once(tiny_lm):
    assert sorted(POLICIES) == ["cpu", "cuda", "reference"]
    policy = policy_for(tiny_lm)
    assert isinstance(policy, CpuPolicy)
    assert policy_for(tiny_lm) is policy  # made once per loaded model
    with pytest.raises(ValueError, match="unknown decode policy 'tpu'"):
        make_policy("tpu")


def test_a_model_can_name_its_policy(make_tiny_lm):
    lm = make_tiny_lm()
    lm.decode_policy = "reference"
    assert isinstance(policy_for(lm), ReferencePolicy)


# ---------------------------------------------------------------------------- vs the reference


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED, HOT], ids=["greedy", "sampled", "hot"])
@pytest.mark.parametrize("mode", ["additive", "projection"])
def test_cpu_policy_equals_the_reference(arch_lm, directions, sampling, mode):
    rows = grid(coefficients=(0.0, 3.0, -3.0) if mode == "additive" else (0.0, 1.0, -1.0))
    ref, _ = decode(arch_lm, rows, directions, sampling, ReferencePolicy(), mode)
    got, _ = decode(arch_lm, rows, directions, sampling, CpuPolicy(), mode)
    assert_same(got, ref, logprob_tol=0)


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED, HOT], ids=["greedy", "sampled", "hot"])
@pytest.mark.parametrize("mode", ["additive", "projection"])
def test_cuda_policy_without_graphs_equals_the_reference(arch_lm, directions, sampling, mode):
    rows = grid(coefficients=(0.0, 3.0, -3.0) if mode == "additive" else (0.0, 1.0, -1.0))
    ref, _ = decode(arch_lm, rows, directions, sampling, ReferencePolicy(), mode)
    got, stats = decode(arch_lm, rows, directions, sampling, CudaPolicy(graphs=False), mode)
    assert_same(got, ref, logprob_tol=1e-5)
    assert stats.rows == len(rows)
    assert stats.new_tokens == sum(g.n_new_tokens for g in got)


SHARP = SamplingConfig(max_new_tokens=6, temperature=0.1, top_p=0.5)


@pytest.mark.parametrize("sampling", [GREEDY, SHARP], ids=["greedy", "sharp"])
def test_the_policies_agree_on_the_multimodal_class(tiny_multimodal_lm, sampling):
    """Gemma 3 4B's class (masks built by its outer model, text layers under
    ``language_model``, 262,208 vocabulary rows): the same tokens under every policy.

    Where the arithmetic does not allow: this random model's distribution over 262,208
    tokens is nearly flat, so at temperature 1 and top-p 0.95 the nucleus holds most of
    the vocabulary in near-equal probabilities, and the static cache's last-bit logit
    differences reorder them (1 of 5 rows took another token at step 4). A sharper
    distribution (temperature 0.1, top-p 0.5) samples the same tokens."""
    lm = tiny_multimodal_lm
    gen = torch.Generator().manual_seed(2)
    dirs = torch.randn(2, lm.hidden_size, generator=gen)
    dirs = dirs / dirs.norm(dim=1, keepdim=True)
    prompts = ["Tell me about dogs.", "Here is a story:", "Tell me about something."]
    rows = [
        GenerationRow(f"m{i}", prompts[i % 3], 60 + i, i % 2, (0.0, 40.0, -40.0)[i % 3])
        for i in range(5)
    ]
    short = replace(sampling, max_new_tokens=6)
    ref, _ = generate_batch(lm, rows, dirs, 2, "additive", short, policy=ReferencePolicy())
    cpu, _ = generate_batch(lm, rows, dirs, 2, "additive", short, policy=CpuPolicy())
    cuda, _ = generate_batch(lm, rows, dirs, 2, "additive", short, policy=CudaPolicy(graphs=False))
    assert_same(cpu, ref, logprob_tol=0)
    assert_same(cuda, ref, logprob_tol=1e-5)


def test_steering_changes_the_tokens_the_policies_agree_on(arch_lm, directions):
    """The agreement above is not vacuous: steered rows differ from the same rows
    unsteered, under every policy (the CUDA policy's own hook does steer)."""
    rows = grid(coefficients=(3.0, 3.0, 3.0))
    plain = [GenerationRow(r.key, r.prompt, r.seed, r.direction, 0.0) for r in rows]
    for policy in (ReferencePolicy(), CpuPolicy(), CudaPolicy(graphs=False)):
        steered, _ = decode(arch_lm, rows, directions, SAMPLED, policy)
        unsteered, _ = decode(arch_lm, plain, directions, SAMPLED, policy)
        assert sum(a.token_ids != b.token_ids for a, b in zip(steered, unsteered, strict=True)) >= 4


def test_log_probs_only_for_the_rows_that_ask_under_the_cuda_policy(tiny_lm, directions):
    rows = grid(5)
    asked = [True, False, True, False, False]
    every, _ = decode(tiny_lm, rows, directions, SAMPLED, CudaPolicy(graphs=False))
    some, _ = decode(
        tiny_lm, rows, directions, SAMPLED, CudaPolicy(graphs=False), logprobs_for=asked
    )
    assert [g.token_ids for g in some] == [g.token_ids for g in every]
    for want, a, b in zip(asked, some, every, strict=True):
        assert a.logprobs == (b.logprobs if want else [])


def test_eager_attention_gets_additive_masks(make_tiny_lm, directions):
    """With ``attn_implementation='eager'`` the static step builds float masks."""
    lm = make_tiny_lm(_attn_implementation="eager")
    rows = grid(5)
    ref, _ = decode(lm, rows, directions, SAMPLED, ReferencePolicy())
    got, _ = decode(lm, rows, directions, SAMPLED, CudaPolicy(graphs=False))
    assert_same(got, ref, logprob_tol=1e-5)


# ------------------------------------------------------------------------ the CUDA policy's logic


def test_a_row_does_not_depend_on_its_batch_under_the_cuda_policy(tiny_lm, directions):
    """Alone (a bucket of 1) or among 11 others (a bucket of 16, padded rows repeating
    the first): the same tokens."""
    rows = grid(12)
    batch, _ = decode(tiny_lm, rows, directions, SAMPLED, CudaPolicy(graphs=False))
    for i in (0, 5, 11):
        alone, _ = decode(tiny_lm, [rows[i]], directions, SAMPLED, CudaPolicy(graphs=False))
        assert alone[0].token_ids == batch[i].token_ids
        assert alone[0].logprobs == pytest.approx(batch[i].logprobs, abs=1e-5)


def test_one_bucket_serves_batch_after_batch(tiny_lm, directions):
    """A second batch in the same bucket reuses the cache and buffers (reset between),
    and gives what a fresh policy gives."""
    policy = CudaPolicy(graphs=False)
    first_rows, second_rows = grid(6), grid(5, coefficients=(-3.0, 0.0, 3.0))[::-1]
    decode(tiny_lm, first_rows, directions, SAMPLED, policy)
    (static,) = policy._static.values()
    again, _ = decode(tiny_lm, second_rows, directions, SAMPLED, policy)
    assert list(policy._static.values()) == [static]  # the 8-row bucket, reused
    fresh, _ = decode(tiny_lm, second_rows, directions, SAMPLED, CudaPolicy(graphs=False))
    assert_same(again, fresh, logprob_tol=0)


def test_a_new_bucket_replaces_the_old_one(tiny_lm, directions):
    policy = CudaPolicy(graphs=False, keep=1)
    decode(tiny_lm, grid(3), directions, GREEDY, policy)
    decode(tiny_lm, grid(9), directions, GREEDY, policy)
    assert [key.rows for key in policy._static] == [16]


def test_prompts_longer_than_the_window_fall_back_to_the_reference(make_tiny_lm, directions):
    """A sliding window of 16 cannot hold 12 prompt tokens and 10 new ones: the policy
    decodes with the reference decoder and keeps no static cache."""
    lm = make_tiny_lm(sliding_window=16)
    long_prompt = "the dog and the cat see a big old tree in the city"
    rows = [GenerationRow("a", long_prompt, 1, 0, 3.0), GenerationRow("b", "cat", 2, 1, 0.0)]
    width = len(lm.tokenizer(long_prompt)["input_ids"])
    assert static_capacity(lm, width, GREEDY.max_new_tokens) is None
    policy = CudaPolicy(graphs=False)
    got, _ = decode(lm, rows, directions, SAMPLED, policy)
    ref, _ = decode(lm, rows, directions, SAMPLED, ReferencePolicy())
    assert_same(got, ref, logprob_tol=0)
    assert not policy._static


def test_static_capacity_rounds_up_within_the_window(tiny_lm):
    assert static_capacity(tiny_lm, 7, 10) == min(CAPACITY_QUANTUM, 64)  # window 64
    assert static_capacity(tiny_lm, 50, 14) == 64
    assert static_capacity(tiny_lm, 50, 15) is None


@given(st.integers(1, 5000))
def test_row_buckets_hold_the_rows_and_come_in_few_sizes(rows):
    bucket = row_bucket(rows)
    assert bucket >= rows
    assert bucket <= max(2 * rows, rows + 63)
    assert row_bucket(bucket) == bucket
    assert bucket in (1, 2, 4) or bucket % 8 == 0


class ForceToken:
    """A forward hook on the output head: ``token`` overwhelmingly likely for ``rows``
    at step ``at_step`` (every step when None)."""

    def __init__(self, token, at_step, rows):
        self.token, self.at_step, self.rows, self.calls = token, at_step, rows, 0

    def __call__(self, _module, _inputs, output):
        if self.at_step is None or self.calls == self.at_step:
            output = output.clone()
            output[self.rows, -1, self.token] = 1e4
        self.calls += 1
        return output


def test_the_cuda_policy_checks_eos_every_few_steps(tiny_lm, directions):
    """Every row stops at step 2; the host only looks after step EOS_EVERY - 1, so the
    policy runs EOS_EVERY forward passes, and the rows still end at their EOS."""
    steps = SamplingConfig(max_new_tokens=EOS_EVERY + 4, greedy=True)
    force = ForceToken(1, at_step=2, rows=[0, 1])
    handle = tiny_lm.model.lm_head.register_forward_hook(force)
    try:
        gens, stats = decode(tiny_lm, grid(2), directions, steps, CudaPolicy(graphs=False))
    finally:
        handle.remove()
    assert force.calls == EOS_EVERY
    assert all(g.stopped_at_eos and g.n_new_tokens == 2 for g in gens)
    assert stats.new_tokens == 4


@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_banned_tokens_are_never_generated_under_the_cuda_policy(tiny_lm, directions, sampling):
    rows = grid(3)
    hooks = [
        tiny_lm.model.lm_head.register_forward_hook(ForceToken(token, None, [i]))
        for i, token in enumerate(suppressed_ids(tiny_lm))
    ]
    try:
        gens, _ = decode(tiny_lm, rows, directions, sampling, CudaPolicy(graphs=False))
    finally:
        for hook in hooks:
            hook.remove()
    banned = set(suppressed_ids(tiny_lm))
    assert all(not banned & set(g.token_ids) for g in gens)


# ---------------------------------------------------------------------------- pieces


@st.composite
def logit_cases(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rows, vocab = draw(st.integers(1, 4)), draw(st.integers(2, 400))
    scale = draw(st.sampled_from([0.01, 0.3, 1.0, 3.0, 10.0]))
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * scale
    sampling = SamplingConfig(temperature=draw(st.floats(0.2, 2.0)), top_p=draw(st.floats(0.01, 1)))
    return logits, torch.rand(rows, generator=g), sampling


@PROPS
@given(logit_cases())
def test_the_stable_sort_picks_what_the_cpu_sampler_picks_up_to_ties(case):
    logits, u, sampling = case
    probs = torch.softmax(logits / sampling.temperature, dim=-1)
    ref = sorted_pick(logits, u, sampling)
    for prefilter in (None, 512, 3):
        got = sample_next(logits, u, sampling, prefilter)
        for row in torch.nonzero(got != ref)[:, 0].tolist():
            assert probs[row, got[row]] == probs[row, ref[row]], "not a tie"


def test_ties_go_to_the_lower_token_id():
    logits = torch.zeros(1, 6)  # six tied tokens: the stable sort keeps id order
    picks = [
        int(sorted_pick(logits, torch.tensor([u]), SamplingConfig(top_p=1.0))[0])
        for u in (0.0, 0.2, 0.4, 0.6, 0.99)
    ]
    assert picks == [0, 1, 2, 3, 5]


@PROPS
@given(
    st.lists(st.integers(0, 9), min_size=3, max_size=3),
    st.lists(st.booleans(), min_size=3, max_size=3),
    st.integers(0, 4),
)
def test_recording_with_a_step_tensor_equals_recording_with_an_int(tokens, done, step):
    """The graph records with a one-element step tensor, eager code with an int."""
    eos = torch.tensor([1, 7])
    a, b = DecodeState(3, 5, 0, eos), DecodeState(3, 5, 0, eos)
    for s in (a, b):
        s.done.copy_(torch.tensor(done))
    nxt, lp = torch.tensor(tokens), torch.tensor([-0.5, -1.5, -2.5])
    fed_a = a.record(step, nxt, lp)
    fed_b = b.record(torch.tensor([step]), nxt, lp)
    assert torch.equal(fed_a, fed_b)
    for name in ("tokens", "logprobs", "done", "lengths"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    stopped = [not d and t in (1, 7) for t, d in zip(tokens, done, strict=True)]
    assert a.lengths.tolist() == [step if s else 5 for s in stopped]


def test_single_product_switches_the_blocked_head_off_and_back(tiny_lm):
    head = tiny_lm.model.get_output_embeddings()
    assert isinstance(head, BlockedHead)
    before = head.block
    with single_product(tiny_lm.model):
        assert head.block == 0
    assert head.block == before


# ---------------------------------------------------------------------------- on a GPU


@pytest.fixture
def tiny_cuda(make_tiny_lm):
    return make_tiny_lm(device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("sampling", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_cuda_graphs_give_what_the_eager_static_step_gives(tiny_cuda, directions, sampling):
    """The captured step replays the eager one: same tokens and log-probs, batch after
    batch, in the same bucket (fp32 on the GPU)."""
    sampling = SamplingConfig(
        max_new_tokens=12, greedy=sampling.greedy, top_p=sampling.top_p
    )  # long enough to warm up, capture and replay
    graphed, eager = CudaPolicy(graphs=True), CudaPolicy(graphs=False)
    for rows in (grid(7), grid(6, coefficients=(3.0, -3.0, 0.0))):
        got, _ = decode(tiny_cuda, rows, directions, sampling, graphed)
        want, _ = decode(tiny_cuda, rows, directions, sampling, eager)
        assert_same(got, want, logprob_tol=1e-6)
    (static,) = graphed._static.values()
    assert static.graphs and static.replay is not None  # captured, and replayed


@pytest.mark.cuda
def test_cuda_policy_matches_the_reference_on_the_gpu(tiny_cuda, directions):
    """The policy's logic (static cache, masks, graph, sampling) with the native kernels."""
    rows = grid(7)
    ref, _ = decode(tiny_cuda, rows, directions, GREEDY, ReferencePolicy())
    got, _ = decode(tiny_cuda, rows, directions, GREEDY, CudaPolicy(kernels=NATIVE))
    assert [g.token_ids for g in got] == [g.token_ids for g in ref]


@pytest.mark.cuda
@pytest.mark.filterwarnings("error::steering.decode_kernels.NormCompileWarning")
def test_the_fused_kernels_decode_what_the_native_ones_do_on_the_gpu(tiny_cuda, directions):
    """The default CUDA kernels (efficient attention, compiled norms) against the native
    ones, greedy in fp32: the same tokens, log-probs to the last digits a reduction
    order moves."""
    assert CudaPolicy().kernels_for(tiny_cuda) == FUSED
    assert decode_description(tiny_cuda) == "cuda: efficient attention, compiled norms"
    rows = grid(7)
    native, _ = decode(tiny_cuda, rows, directions, GREEDY, CudaPolicy(kernels=NATIVE))
    fused, _ = decode(tiny_cuda, rows, directions, GREEDY, CudaPolicy())
    assert [g.token_ids for g in fused] == [g.token_ids for g in native]
    for a, b in zip(fused, native, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


@pytest.mark.cuda
def test_a_row_does_not_depend_on_the_other_rows_contents_on_the_gpu(tiny_cuda, directions):
    """On the GPU a row's text may depend on its bucket's size and the batch's prompt
    width (kernels are chosen by shape; the cache layout follows the padding), not on
    what the other rows hold: one prompt, eight rows of other seeds, directions and
    strengths, against the same row eight times."""
    prompt = PROMPTS[0]
    rows = [
        GenerationRow(f"r{i}", prompt, 70 + i, i % 2, (0.0, 3.0, -3.0, 1.0)[i % 4])
        for i in range(8)
    ]
    mixed, _ = decode(tiny_cuda, rows, directions, SAMPLED, CudaPolicy())
    for i in (0, 3):
        copies = [GenerationRow(f"c{j}", prompt, rows[i].seed, rows[i].direction,
                                rows[i].coefficient) for j in range(8)]  # fmt: skip
        alone, _ = decode(tiny_cuda, copies, directions, SAMPLED, CudaPolicy())
        assert alone[0].token_ids == mixed[i].token_ids
        assert alone[0].logprobs == mixed[i].logprobs


class HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the ops that make the host wait for a device value: ``.item()``, ``int()``
    and ``bool()`` of a tensor (``_local_scalar_dense``, ``is_nonzero``), ``torch.equal``,
    ops whose output size depends on the data (``nonzero``, ``masked_select``,
    ``unique``), and tensors made from host data (``lift_fresh``: a copy from pageable
    host memory, which a capture refuses)."""

    SYNCING = (
        "_local_scalar_dense",
        "is_nonzero",
        "equal",
        "nonzero",
        "masked_select",
        "unique",
        "lift_fresh",
    )

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if any(name.startswith(s) or name.startswith(f"_{s}") for s in self.SYNCING):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("model", ["tiny", "multimodal"])
def test_the_decode_step_never_waits_on_the_host(tiny_lm, tiny_multimodal_lm, directions, model):
    """What a CUDA graph captures must not read a device value on the host: checked here,
    on the CPU, by watching every op of a decode step (the model's forward pass, the
    steering hook, the sampler, the EOS bookkeeping)."""
    from steering.generation import prepare_batch

    lm = tiny_lm if model == "tiny" else tiny_multimodal_lm
    dirs = torch.randn(2, lm.hidden_size, generator=torch.Generator().manual_seed(1))
    policy = CudaPolicy(graphs=False)
    rows = grid(5)
    for sampling in (SAMPLED, GREEDY):
        with torch.inference_mode():
            batch = prepare_batch(lm, rows, dirs, LAYER, "additive", sampling)
            with policy.decoder(lm, batch) as decoder:
                decoder.step(0)  # the prefill is eager: transformers' masks may read
                watch = HostReads()
                with watch:
                    for step in range(1, 4):
                        decoder.step(step)
        assert watch.seen == [], sorted(set(watch.seen))
    # the watch does see waits: the CPU policy's EOS check (and, on the 262k vocabulary,
    # its prefilter's short rows)
    with torch.inference_mode():
        batch = prepare_batch(lm, rows, dirs, LAYER, "additive", SAMPLED)
        with CpuPolicy().decoder(lm, batch) as decoder, HostReads() as watch:
            decoder.step(0)
            decoder.all_done()
    assert "is_nonzero" in watch.seen
    assert model == "tiny" or "nonzero" in watch.seen
