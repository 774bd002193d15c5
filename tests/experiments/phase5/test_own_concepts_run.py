"""The pipeline end to end on your own concepts (data/concepts/own_example.json) with the
tiny random Gemma: probes trained from the file's texts, generation, Δ, the answer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from experiments.concepts import load_concepts
from experiments.kernel.probes import graph_key
from experiments.phase5.run import run_phase5
from experiments.rundir import RunDir

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "concepts" / "own_example.json"


def example_words() -> set[str]:
    """The example's words, so the tiny word-level tokenizer does not read every concept
    name as <unk> (texts differing only in an unknown word would embed identically)."""
    graph = load_concepts(EXAMPLE)
    text = " ".join(
        " ".join([c.name, *c.lemmas, c.gloss, *c.related_terms, *c.examples]) for c in graph
    )
    return set(re.findall(r"[a-z]+", text.lower()))


@pytest.fixture
def own_run(tmp_path, mlflow_store, tiny_lm_knowing, embedder, single_threaded, tiny_phase5_config):
    tmp = tmp_path
    config = tiny_phase5_config(tmp, "concepts.file=data/concepts/own_example.json")
    with single_threaded():
        return config, run_phase5(config, lm=tiny_lm_knowing(example_words()), embedder=embedder)


def test_a_run_on_own_concepts_trains_their_probes_and_scores_their_texts(own_run):
    _config, result = own_run
    record = result.record
    ids = ["blockchain", "podcast", "selfie", "ransomware"]
    assert sorted(record.predictors) == sorted(ids)
    assert all(0 <= p["auroc"] <= 1 for p in record.predictors.values())
    generations = RunDir(result.results_dir.parent, result.run_id).read_generations()
    # 4 concepts × 3 prompts × (unsteered + 2 concept + 2 random) rows
    assert len(generations) == 4 * 3 * 5
    assert "Tell me about podcast." in {g["prompt"] for g in generations}
    assert set(record.per_concept) == set(ids)
    key = graph_key(load_concepts(EXAMPLE))
    assert f"_g{key}_" in record.classifier_dir
    answer = (result.results_dir / RunDir.ANSWER).read_text(encoding="utf-8")
    assert "4 concepts" in answer and "| s > 0 | effect above null (gated) |" in answer
