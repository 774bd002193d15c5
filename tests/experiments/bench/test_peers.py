"""experiments.bench.decode.peers: the HF batched peer does the same work as ours."""

from __future__ import annotations

from dataclasses import replace

from experiments.bench.core.measure import Measurement
from experiments.bench.decode.batched import hf_sampling_kwargs
from experiments.bench.decode.peers import (
    HF_BATCHED,
    greedy_agreement,
    hf_generate_batch,
    run_hf_batched,
    section_peers,
)
from steering.generation import generate_batch


def _greedy(wl, tokens):
    return replace(wl, sampling=replace(wl.sampling, greedy=True, max_new_tokens=tokens))


def test_hf_batched_generate_matches_ours_under_greedy(tiny_lm, one_thread, synthetic_workload):
    # strong steering, so a peer that dropped or misrouted the per-row edit would differ
    prompts = ("the dog is a good animal in the house", "tell me")
    wl = synthetic_workload(tiny_lm, n_concepts=2, prompts=prompts, alpha=40.0, beta=1.0)
    wl = _greedy(wl, 6)
    lengths = {len(tiny_lm.tokenizer(p)["input_ids"]) for p in prompts}
    assert len(lengths) == 2  # left padding is exercised
    ours, _ = generate_batch(tiny_lm, wl.rows, wl.directions, wl.layer, wl.mode, wl.sampling)
    theirs = hf_generate_batch(tiny_lm, wl, wl.rows)
    assert [g.key for g in theirs] == [r.key for r in wl.rows]
    assert [g.token_ids for g in theirs] == [g.token_ids for g in ours]
    assert [g.text for g in theirs] == [g.text for g in ours]
    assert [g.n_prompt_tokens for g in theirs] == [g.n_prompt_tokens for g in ours]
    # and the steering is real: the strengths change the text
    by_strength = {}
    for g, r in zip(ours, wl.rows, strict=True):
        by_strength.setdefault(wl.strengths[r.key], []).append(tuple(g.token_ids))
    assert by_strength[-1.0] != by_strength[1.0]


def test_sampling_settings_match_ours(tiny_lm, synthetic_workload):
    wl = synthetic_workload(tiny_lm, n_concepts=1)
    kwargs = hf_sampling_kwargs(tiny_lm, wl)
    s = wl.sampling
    assert kwargs["do_sample"] is True and kwargs["top_k"] == 0  # HF's top_k=50 off
    assert (kwargs["top_p"], kwargs["temperature"]) == (s.top_p, s.temperature)
    assert kwargs["max_new_tokens"] == s.max_new_tokens
    assert tiny_lm.tokenizer.pad_token_id in kwargs["suppress_tokens"]


def test_timed_pass_and_section(tiny_lm, one_thread, synthetic_workload):
    wl = synthetic_workload(tiny_lm, n_concepts=2, max_new_tokens=4, batch_size=5)
    m = run_hf_batched(tiny_lm, wl)
    assert m.rows == len(wl.rows) and len(m.seconds) == 1
    assert m.tokens[0] == sum(g.n_new_tokens for g in m.generations) > 0
    assert sorted(g.key for g in m.generations) == sorted(r.key for r in wl.rows)
    ours = Measurement(rows=len(wl.rows))
    ours.add(1.0, 100)
    m.seconds, m.tokens = [2.0], [50]
    agreement = greedy_agreement(tiny_lm, wl, 4, 3)
    assert agreement["identical"] == "4/4"
    out = section_peers(wl, {"float32": ours, HF_BATCHED: m}, "float32", agreement, {})
    assert out["peers"][HF_BATCHED]["ratio_ours_vs_peer"] == 4.0  # 100 tok/s over 25 tok/s
    assert "skipped" in out["peers"]["hf_generate_per_sample"]
