"""experiments.bench.decode.head: the head's block sizes timed side by side, checked bit for bit."""

from __future__ import annotations

import pytest

from experiments.bench.decode.head import head_block, time_products


def test_the_quick_run_compares_one_product_with_blocks(quick_results):
    opts, workload, results = quick_results
    head = results["sections"]["head"]
    assert head["blocked_run_block"] == opts.head_block == 256
    assert set(head["products"]) == {"0", "256"}
    for entry in head["products"].values():
        assert entry["bit_identical_to_single_product"] is True
        assert entry["median_ms"] > 0 and entry["gflops"] > 0
    gen = head["generation"]
    assert gen["single"]["rows"] == gen["blocked"]["rows"] == len(workload.rows)
    assert head["texts_identical"] == f"{len(workload.rows)}/{len(workload.rows)}"
    expected = gen["blocked"]["tokens_per_second"] / gen["single"]["tokens_per_second"]
    assert head["ratio_blocked_vs_single"] == pytest.approx(expected, rel=1e-3, abs=5e-4)


def test_head_block_restores_the_head(tiny_lm, one_thread):
    head = tiny_lm.model.get_output_embeddings()
    before = head.block
    with head_block(tiny_lm, 256):
        assert head.block == 256
        out = time_products(tiny_lm, rows=3, repeats=1, blocks=(0, 256))
    assert head.block == before
    assert out["256"]["bit_identical_to_single_product"] is True


def test_the_results_hold_the_head_comparison(quick_results):
    _, workload, results = quick_results
    head = results["sections"]["head"]
    assert list(head["products"]) == ["0", "256"]  # one product, then blocks of 256
    assert all(v["bit_identical_to_single_product"] for v in head["products"].values())
    assert head["texts_identical"] == f"{len(workload.rows)}/{len(workload.rows)}"
