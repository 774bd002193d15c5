"""The stage pipeline reproduces the pre-refactor Phase 5 run exactly.

``golden_tiny_run.json`` holds the texts and Δ of a Phase 5 run of the monolithic
``experiments/phase5.py`` (commit 2f71ac2) on the tiny random Gemma with the real
MiniLM: 3 concepts × 3 prompts × 3 strengths, 12 new tokens, batches of 4, layer 2,
seed 0, and no null-control rows (they change how rows share batches, and a batch's
padding can move the last bits). The refactored pipeline must give the same texts and Δ. Texts are
compared exactly; Δ to 1e-6, since the embedder's last bits can differ between CPU kinds
(on the machine that wrote the file they are bit-identical).

The probes changed on purpose since (format-matched training sets, PROBE_RECIPE
format-matched-v3), which changes every steering direction. So the test now pins the
steering pipeline apart from probe training: ``golden_tiny_probes/`` holds the
classifiers that run used (trained by commit a8ffe39, identical to 2f71ac2's), and they
are placed in the classifier folder before the run, which then loads instead of training.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.kernel.probes import classifier_dir, graph_key
from experiments.phase5.run import run_phase5
from experiments.strength_range import StrengthLimits, StrengthRange, Unsteered, save_range

GOLDEN = Path(__file__).with_name("golden_tiny_run.json")
GOLDEN_PROBES = Path(__file__).with_name("golden_tiny_probes")


def around(beta: float, model_id: str) -> StrengthRange:
    """A recorded range from β/2 to 2β (its own β 2β, which the run must not take)."""
    return StrengthRange(
        model_id=model_id,
        layer=2,
        mode="additive",
        vector_source="classifier",
        alpha=1.0,
        grid=[beta / 2, beta, 2 * beta],
        concepts=[],
        prompts=3,
        max_new_tokens=12,
        seed=0,
        limits=StrengthLimits(),
        unsteered=Unsteered(perplexity=20.0, near_empty=0.0, distinct_2=1.0),
        steps=[],
        low=beta / 2,
        high=2 * beta,
        beta=2 * beta,
    )


@pytest.mark.parametrize("recorded", [False, True], ids=["no-range", "range-around-beta"])
def test_pipeline_reproduces_the_monolithic_run(
    tmp_path, mlflow_store, tiny_lm, embedder, one_thread, recorded
):
    """``range-around-beta``: a strength range recorded with the classifiers that holds
    the config's β (issue 37) leaves every text and Δ as they were."""
    config = load_config(
        "configs/phase5.yaml",
        [
            "concepts.limit=3",
            "generation.max_new_tokens=12",
            "generation.batch_size=4",
            "layer=2",
            "controls.random_directions=0",
            f"classifier.dir={tmp_path / 'cls'}",
            f"tracking.results_dir={tmp_path / 'res'}",
        ],
    )
    graph = load_concepts(config.concepts.file, limit=config.concepts.limit)
    directory = classifier_dir(config, tiny_lm.model_id, 2, graph_key(graph))
    directory.mkdir(parents=True)
    for path in GOLDEN_PROBES.glob("*.json"):
        shutil.copy(path, directory / path.name)
    if recorded:
        save_range(directory, around(config.steering.beta, tiny_lm.probe_id))
    result = run_phase5(config, lm=tiny_lm, embedder=embedder)
    assert result.record.classifier_run_id is None  # loaded, not retrained
    golden = {r["key"]: r for r in json.loads(GOLDEN.read_text())}
    got = result.records.set_index("key")
    assert sorted(got.index) == sorted(golden)
    texts_differ = [k for k in golden if got.loc[k, "text"] != golden[k]["text"]]
    assert not texts_differ, (
        f"{len(texts_differ)} of {len(golden)} texts differ: {texts_differ[:3]}"
    )
    worst = max(abs(float(got.loc[k, "delta"]) - golden[k]["delta"]) for k in golden)
    assert worst < 1e-6
