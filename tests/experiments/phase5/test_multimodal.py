"""The default pipeline on the users' model class, ``Gemma3ForConditionalGeneration``.

``google/gemma-3-4b-pt`` loads as the multimodal class: its text layers sit under
``model.language_model`` and its config nests a text and a vision config. A tiny random
one (text hidden 64, 4 layers, the 4B's 262,208-row vocabulary with the embedded
tokenizer; SigLIP hidden 32, one layer, 28-pixel images in 14-pixel patches) runs every
stage of ``run_phase5`` on the CPU: probes, vectors, generation, perplexity, scoring.
"""

from __future__ import annotations

import math

from experiments.config import load_config
from experiments.phase5.run import run_phase5


def test_the_default_pipeline_runs_on_the_multimodal_class(
    tmp_path, mlflow_store, tiny_multimodal_lm, embedder, one_thread
):
    lm = tiny_multimodal_lm
    assert type(lm.model).__name__ == "Gemma3ForConditionalGeneration"
    assert lm.layers is lm.model.model.language_model.layers
    assert lm.hidden_size == 64 and lm.n_layers == 4
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=6",
            "generation.batch_size=16",
            "tracking.child_runs=none",
            "tracking.traces=false",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    result = run_phase5(config, lm=lm, embedder=embedder)
    records = result.records
    n_strengths = len(config.steering.strengths)
    assert len(records) >= 3 * len(config.generation.prompts) * n_strengths
    assert records["text"].map(lambda t: isinstance(t, str)).all()
    assert records["delta"].map(math.isfinite).all()
    assert (result.results_dir / "steering_results.json").exists()
    assert result.record.model_id == lm.model_id
    # Steering reached the language model's layers: steered texts differ from unsteered.
    by_key = records.set_index(["concept", "prompt", "strength"])["text"]
    concept, prompt = records.iloc[0]["concept"], records.iloc[0]["prompt"]
    texts = {s: by_key[(concept, prompt, s)] for s in config.steering.strengths}
    assert len({str(t) for t in texts.values()}) > 1
