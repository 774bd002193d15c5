"""The run's device flow: sizes from the card's memory on CUDA, the CPU's unchanged.

On the CPU every stage keeps its tuned constants (``generation.batch_size: auto`` means
96 rows there); on a GPU the whole default pipeline runs on the card (the tests marked
``cuda``: activation capture, generation, perplexity, MiniLM and the specificity scores).
"""

from __future__ import annotations

import math

import pytest
import torch

from experiments.config import CPU_BATCH_ROWS, ConfigError, load_config
from experiments.kernel.generate import batch_rows
from experiments.phase5.run import run_phase5
from steering.activations import pooled_activations
from steering.generation import GenerationRow, continuation_nll

PROMPTS = ["tell me about the dog .", "cat", "here is a story :"]


def test_batch_size_is_a_number_or_auto():
    assert load_config("configs/phase5.yaml").generation.batch_size == CPU_BATCH_ROWS == 96
    assert load_config(None, ["generation.batch_size=auto"]).generation.batch_size == "auto"
    assert load_config(None, ["generation.batch_size=12"]).generation.batch_size == 12
    for bad in ("0", "lots"):
        with pytest.raises(ConfigError, match="batch_size"):
            load_config(None, [f"generation.batch_size={bad}"])


def test_auto_means_the_cpu_default_on_the_cpu(tiny_lm):
    rows = [GenerationRow(f"r{i}", p, i) for i, p in enumerate(PROMPTS)]
    assert batch_rows(load_config(None, ["generation.batch_size=auto"]), tiny_lm, rows) == 96
    assert batch_rows(load_config(None, ["generation.batch_size=7"]), tiny_lm, rows) == 7


def test_the_perplexity_pass_keeps_its_cpu_sizes(tiny_lm, one_thread):
    conts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    default = continuation_nll(tiny_lm, PROMPTS, conts)
    assert default == continuation_nll(
        tiny_lm, PROMPTS, conts, batch_size=32, logits_budget=1 << 26
    )


# ---------------------------------------------------------------------------- on a GPU


@pytest.mark.cuda
def test_activations_and_perplexity_on_the_card_match_the_cpu(tiny_lm, make_tiny_lm):
    gpu = make_tiny_lm(device="cuda")
    cpu_acts = pooled_activations(tiny_lm, PROMPTS, 2)
    gpu_acts = pooled_activations(gpu, PROMPTS, 2)
    assert torch.allclose(cpu_acts, gpu_acts, atol=1e-3, rtol=1e-3)
    conts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    on_cpu, on_gpu = (
        continuation_nll(tiny_lm, PROMPTS, conts),
        continuation_nll(gpu, PROMPTS, conts),
    )
    assert on_gpu == pytest.approx(on_cpu, abs=1e-3)


@pytest.mark.cuda
def test_the_default_pipeline_runs_on_the_card(tmp_path, mlflow_store, make_tiny_multimodal_lm):
    """The users' class on CUDA, every stage on the card, batch sizes from its memory;
    the peak is what ``steer-eval run`` prints."""
    from metrics.embedder import load_embedder
    from steering.memory import peak_gib

    lm = make_tiny_multimodal_lm("cuda")
    embedder = load_embedder("embedded", lm.platform.embedder_device)
    assert str(embedder.device).startswith("cuda")  # MiniLM follows the model's card
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=6",
            "generation.batch_size=auto",
            "tracking.child_runs=none",
            "tracking.traces=false",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    result = run_phase5(config, lm=lm, embedder=embedder)
    assert result.records["delta"].map(math.isfinite).all()
    assert peak_gib() > 0
