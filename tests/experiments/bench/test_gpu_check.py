"""The GPU check's parts that run without a card: the luggage list, the bench lines a
stopped bench leaves, the kernel kinds, the profile's step count and the report."""

from __future__ import annotations

import json

import pytest
import torch

from experiments.bench.core.options import GPU_HF_DYNAMIC, GPU_OURS, BenchOptions
from experiments.bench.gpu.gpu import time_sizes
from experiments.bench.gpu.gpu_check import (
    NOT_CARRIED,
    arms_from_log,
    image_packages,
    report,
    to_carry,
)
from experiments.bench.gpu.gpu_profile import kind_of, profile_rows

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_luggage_is_what_the_image_lacks_plus_our_transformers():
    carry = to_carry()
    image = image_packages()
    assert {"torch", "transformers", "sentence-transformers", "numpy"} <= image
    assert "transformers" in carry  # carried at our pin although the image has one
    assert {"mlflow-skinny", "pydantic", "nltk", "sqlalchemy", "cryptography"} <= set(carry)
    assert not (set(carry) - {"transformers"}) & image
    assert not set(carry) & NOT_CARRIED  # no GGUF chunks, no MiniLM package, no server


def test_a_stopped_bench_leaves_its_arms_in_the_log(tiny_lm, tmp_path):
    """The lines the section says as each arm lands parse back into the same numbers."""
    lines: list[str] = []
    opts = BenchOptions(gpu_rows=(2,), gpu_tokens=3, gpu_repeats=1, gpu_compiled=False)
    runs = time_sizes(tiny_lm, opts, torch.device("cpu"), 1e9, 1e12, lines.append)
    (tmp_path / "bench.log").write_text("\n".join(["noise", *lines]) + "\n")
    parsed = arms_from_log(tmp_path / "bench.log")
    assert set(parsed["runs"]["2"]) == {GPU_OURS, GPU_HF_DYNAMIC}
    for arm in (GPU_OURS, GPU_HF_DYNAMIC):
        got, want = parsed["runs"]["2"][arm], runs["2"][arm]
        assert got["tokens_per_second"] == want["tokens_per_second"]
        assert got["first_call_seconds"] == want["first_call_seconds"]
        assert got["peak_gib"] is None  # the CPU has no card's peak
    assert arms_from_log(tmp_path / "missing.log") is None


@pytest.mark.parametrize(
    ("kernel", "kind"),
    [  # names the H100 run of 2026-11-27 reported
        ("void at_cuda_detail::cub::detail::radix_sort::DeviceSegmentedRadixSortKernel<", "sort"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7", "attention"),
        ("nvjet_sm90_tst_168x128_64x5_1x2_h_bz_TNN", "matmul"),
        ("void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >", "scan"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float", "softmax"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel", "other"),
    ],
)
def test_kernel_kinds(kernel, kind):
    assert kind_of(kernel) == kind


def test_the_profile_counts_each_decode_step_once(tiny_lm):
    """Steps 1..n-1 are decode steps (step 0 is the prefill); the H100 run had counted
    each twice, its range on the host and again on the card's timeline."""
    result = profile_rows(tiny_lm, rows=3, tokens=5)
    assert result["decode_steps"] == 4
    assert result["host_ms_per_step_eager"] > 0
    assert result["whole_call_top_ops"]  # the by-op table, prefill included
    assert result["kernel_ms_per_step"] == 0.0  # no CUDA kernels on the CPU
    assert result["kernels"] == {"attention": False, "norms": False, "backend": "inductor"}


def test_the_report_holds_what_the_steps_left(tmp_path):
    (tmp_path / "steps.jsonl").write_text(
        '{"step": "machine", "rc": 0, "seconds": 5.0}\n'
        '{"step": "bench", "rc": 124, "seconds": 9.5}\n'
    )
    (tmp_path / "env.json").write_text(json.dumps({"gpu": "NVIDIA H100 80GB HBM3"}))
    (tmp_path / "bench.log").write_text(
        "gpu: 256 rows, ours: 9891.8 tok/s, first call 1.744 s, peak 13.4 GiB\n"
        "gpu: 256 rows, hf_generate_hook: 3644.0 tok/s, first call 6.718 s, peak 15.26 GiB\n"
    )
    report(tmp_path, tmp_path / "out.json")
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["format"] == "steer-eval/gpu-check" and out["machine"]["gpu"].startswith("NVIDIA")
    assert [s["rc"] for s in out["steps"]] == [0, 124]
    assert out["bench"]["runs"]["256"]["ours"] == {
        "tokens_per_second": 9891.8,
        "first_call_seconds": 1.744,
        "peak_gib": 13.4,
    }
    assert out["bench"]["runs"]["256"][GPU_HF_DYNAMIC]["ours_over_this"] == 2.715
    targets = {t["key"]: t for t in out["bench_targets"]}
    assert targets["ours_vs_hf_dynamic_256"]["value"] == 2.715
    assert targets["ours_vs_hf_dynamic_256"]["met"] is False  # >= 3 wanted
    assert targets["matrix_rate_fraction_1024"]["met"] is None  # not in a log line
    assert out["cuda_tests"] is None and out["smoke_run"] is None
