"""experiments.bench.decode.roofline: FLOPs counted from the shape match what torch executes."""

from __future__ import annotations

import copy

import pytest
from torch.utils.flop_counter import FlopCounterMode

from experiments.bench.core.measure import Measurement
from experiments.bench.decode.roofline import (
    PRODUCTS,
    SUSTAINED,
    LoopBatch,
    ModelShape,
    forward_flops,
    generation_flops,
    per_token,
    products_only,
    run_products_only,
    run_sustained_matmul,
    section_roofline,
)
from steering.generation import GenerationRow, SamplingConfig, generate_batch
from steering.models import wrap_model

GEMMA3_270M = ModelShape(
    hidden=640,
    intermediate=2048,
    heads=4,
    kv_heads=1,
    head_dim=256,
    vocab=262_144,
    windows=(512, 512, 512, 512, 512, None) * 3,
)


def _flops_by_module(lm, rows, tokens):
    with FlopCounterMode(display=False) as counter:
        gens, _ = generate_batch(lm, rows, None, 1, "additive", SamplingConfig(tokens, greedy=True))
    counts = counter.get_flop_counts()

    def total(name: str) -> int:
        return sum(counts.get(name, {}).values())

    return gens, counts, total


def test_layer_and_head_flops_match_torchs_count(tiny_lm, one_thread):
    shape = ModelShape.of(tiny_lm)
    assert shape.n_layers == tiny_lm.n_layers and shape.vocab == 512
    rows = [GenerationRow("a", "the dog is a good animal", 1), GenerationRow("b", "tell me", 2)]
    gens, _, total = _flops_by_module(tiny_lm, rows[:1], 5)
    ours = generation_flops(shape, gens)["total"]
    layers = sum(total(f"Gemma3ForCausalLM.model.layers.{i}") for i in range(shape.n_layers))
    assert ours["layers"] == layers  # sdpa on CPU is not counted by torch: linear maps only
    assert ours["head"] == total("Gemma3ForCausalLM.lm_head")


def test_attention_flops_match_eager_attention(tiny_lm, one_thread):
    """Eager attention runs as matmuls torch counts; its prefill computes the full square
    (masked), where the count keeps the causal half."""
    model = copy.deepcopy(tiny_lm.model)
    model.set_attn_implementation("eager")
    lm = wrap_model(model, tiny_lm.tokenizer, "tiny-eager")
    shape = ModelShape.of(lm)
    gens, _, total = _flops_by_module(lm, [GenerationRow("a", "the dog is a good animal", 1)], 6)
    g = gens[0]
    counted = sum(total(f"Gemma3ForCausalLM.model.layers.{i}") for i in range(shape.n_layers))
    ours = generation_flops(shape, [g])["total"]
    n = g.n_prompt_tokens
    causal = sum(shape.attention_flops(p) for p in range(1, n + 1))
    full_square = n * shape.attention_flops(n)
    assert counted - ours["layers"] == ours["attention"] - causal + full_square


def test_eos_rows_count_the_forward_pass_that_found_it(tiny_lm):
    shape = ModelShape.of(tiny_lm)
    from steering.generation import Generation

    kept = Generation("k", "p", "t", [5, 6], 3, stopped_at_eos=True)
    cut = Generation("c", "p", "t", [5, 6], 3, stopped_at_eos=False)
    assert generation_flops(shape, [kept])["total"]["head"] == 3 * shape.head_flops
    assert generation_flops(shape, [cut])["total"]["head"] == 2 * shape.head_flops
    empty = Generation("e", "p", "", [], 3, stopped_at_eos=False)
    assert generation_flops(shape, [empty])["total"] == {"layers": 0, "attention": 0, "head": 0}


def test_sliding_windows_cap_attention():
    shape = ModelShape(8, 16, 2, 1, 4, 32, windows=(4, None))
    per_key = 4 * 2 * 4
    assert shape.attention_flops(10) == per_key * (4 + 10)
    assert forward_flops(shape, 2, 9, 1)["attention"] == per_key * (4 + 10) + per_key * (4 + 11)


def test_the_output_head_dominates_the_embedded_models_decode_step():
    step = per_token(GEMMA3_270M, 64)
    assert step["head_mflop"] == pytest.approx(2 * 640 * 262_144 / 1e6, abs=1e-3)
    assert step["layers_mflop"] == pytest.approx(18 * 2 * 5_570_560 / 1e6, abs=1e-3)
    assert 0.6 < step["share"]["head"] < 0.65


def test_section_reports_achieved_against_peak(tiny_lm, one_thread):
    rows = [GenerationRow(f"r{i}", "the dog is", i) for i in range(3)]
    gens, _ = generate_batch(tiny_lm, rows, None, 1, "additive", SamplingConfig(4))
    m = Measurement(rows=3, generations=gens)
    m.add(0.5, sum(g.n_new_tokens for g in gens))
    out = section_roofline(tiny_lm, {"float32": m}, ["float32"])
    run = out["runs"]["float32"]
    work = generation_flops(ModelShape.of(tiny_lm), gens)
    assert run["flop_total"] == sum(work["total"].values()) > 0
    assert run["achieved_gflops"] == pytest.approx(run["flop_total"] / 1e9 / 0.5, abs=1e-3)
    assert sum(run["share_of_work"].values()) == pytest.approx(1.0, abs=1e-3)
    assert out["machine"]["physical_cores"] >= 1 and "peak_how" in out["machine"]
    # the peak is the higher of the modelled one and the matmul ceiling measured now
    ceiling = out["matmul_ceiling"]["float32"]
    assert ceiling["gflops"] == max(ceiling["by_shape"].values()) > 0
    assert run["matmul_ceiling_gflops"] == ceiling["gflops"]
    assert run["modelled_peak_gflops"] == out["machine"]["peak_gflops"]
    peak = max(p for p in (run["modelled_peak_gflops"], ceiling["gflops"]) if p)
    assert run["peak_gflops"] == peak
    assert run["fraction_of_peak"] == pytest.approx(run["achieved_gflops"] / peak, abs=1e-3)
    # no sustained rounds were timed: that fraction is absent, not invented
    assert run["fraction_of_sustained_matmul"] is None and "sustained_matmul" not in out


def test_sustained_matmul_rounds_give_a_second_fraction(tiny_lm, one_thread):
    rows = [GenerationRow(f"r{i}", "the dog is", i) for i in range(2)]
    gens, _ = generate_batch(tiny_lm, rows, None, 1, "additive", SamplingConfig(3))
    m = Measurement(rows=2, generations=gens)
    m.add(0.25, sum(g.n_new_tokens for g in gens))
    rounds = None
    for _ in range(3):
        rounds = run_sustained_matmul(rounds, seconds_per_shape=0.05)
    assert rounds is not None and len(rounds.seconds) == 3 and set(rounds.tokens) == {0}
    rates = rounds.extra["gflops"]
    assert len(rates) == 3 and all(r > 0 for r in rates)
    # each round's rate is its best shape's
    assert rates == [max(b.values()) for b in rounds.extra["by_shape"]]
    out = section_roofline(tiny_lm, {"float32": m, SUSTAINED: rounds}, ["float32"])
    run = out["runs"]["float32"]
    median = sorted(rates)[1]
    assert out["sustained_matmul"]["float32"]["gflops"] == pytest.approx(median, abs=0.05)
    assert run["sustained_matmul_gflops"] == pytest.approx(median, abs=0.05)
    assert run["fraction_of_sustained_matmul"] == pytest.approx(
        run["achieved_gflops"] / median, abs=1e-4
    )


def test_products_only_replays_every_product_of_the_loop(tiny_lm, one_thread):
    """Each batch's prefill at its padded width, then one position per row per further
    pass, through every linear map of every layer, and the head once per row per pass."""
    batches = [LoopBatch(rows=3, width=4, passes=5), LoopBatch(rows=2, width=6, passes=1)]
    with FlopCounterMode(display=False) as counter:
        seconds = products_only(tiny_lm, batches)
    shape = ModelShape.of(tiny_lm)
    positions = 3 * 4 + 3 * 4 + 2 * 6
    head_positions = 3 * 5 + 2 * 1
    assert counter.get_total_flops() == (
        positions * shape.layer_flops + head_positions * shape.head_flops
    )
    assert seconds > 0


def test_the_products_bound_is_the_loop_s_work_over_their_time(tiny_lm, one_thread):
    rows = [GenerationRow(f"r{i}", "the dog is", i) for i in range(3)]
    gens, _ = generate_batch(tiny_lm, rows, None, 1, "additive", SamplingConfig(4))
    m = Measurement(rows=3, generations=gens)
    m.add(0.5, sum(g.n_new_tokens for g in gens))
    passes = max(g.n_new_tokens + int(g.stopped_at_eos) for g in gens)
    batch = LoopBatch(3, max(g.n_prompt_tokens for g in gens), passes)
    replay = Measurement()
    replay.add(products_only(tiny_lm, [batch]), 0)
    out = section_roofline(tiny_lm, {"float32": m, PRODUCTS: replay}, ["float32"])
    run = out["runs"]["float32"]
    bound = run["products_only"]
    assert bound["seconds"] > 0 and "products_only_how" in out
    assert bound["gflops_bound"] == pytest.approx(
        run["flop_total"] / 1e9 / bound["seconds"], rel=1e-3
    )
    assert bound["share_of_loop"] == pytest.approx(bound["seconds"] / 0.5, abs=1e-4)
    assert bound["fraction_of_peak_bound"] == pytest.approx(
        bound["gflops_bound"] / run["peak_gflops"], abs=1e-4
    )
    # without replays there is no bound, and nothing is invented
    assert (
        "products_only"
        not in section_roofline(tiny_lm, {"float32": m}, ["float32"])["runs"]["float32"]
    )


def test_the_bound_replayed_in_every_round_takes_the_median_of_its_rounds(
    tiny_lm, synthetic_workload, one_thread
):
    """Replayed right after the loop it bounds (the batches that loop just ran), once per
    round; the section takes the median of those replays and says so."""
    from experiments.bench.decode.batched import run_batched

    wl = synthetic_workload(tiny_lm, max_new_tokens=3)
    loop = run_batched(tiny_lm, wl)
    rounds = None
    for _ in range(3):
        rounds = run_products_only(tiny_lm, wl, loop, rounds)
    assert rounds is not None and len(rounds.seconds) == 3 and set(rounds.tokens) == {0}
    out = section_roofline(tiny_lm, {"float32": loop, PRODUCTS: rounds}, ["float32"])
    bound = out["runs"]["float32"]["products_only"]
    assert bound["seconds"] == pytest.approx(sorted(rounds.seconds)[1], abs=1e-6)
    assert "in every side-by-side round, the median of 3" in out["products_only_how"]
