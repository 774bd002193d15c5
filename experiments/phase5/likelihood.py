"""Stage: the likelihood outcome of every steering direction (Pres et al. 2024).

For each concept: fixed on-concept texts and length-matched off-concept partners
(``experiments/likelihood_texts.py``: built from WordNet names, never glosses, and checked
disjoint from every probe, centroid, α-scale and prompt text). Every direction of the
concept steers every position at s·β·α: its own, its isotropic random ones, and nulls
from the model's own distribution (diffmeans of random neutral-text splits and other
concepts' directions, ``phase5/nulls.py``). Per text pair the outcome is
e = s·((L_s − L_0)(on) − (L_s − L_0)(off)), L the mean per-token log-likelihood,
teacher-forced: no sampling noise, so a concept's value is reliable from ten pairs, and
suppression shows at s < 0.

Records go to ``likelihood.jsonl`` concept by concept, so a resumed run skips concepts
already scored; the texts go to ``likelihood_texts.json`` (also written when the outcome
is off: they are Δ's reference texts). ``steer-eval rescore`` reads both, never the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import cast

from experiments.concepts import ConceptGraph
from experiments.config import ExperimentConfig
from experiments.kernel.vectors import VectorSet
from experiments.likelihood_texts import LikelihoodTexts, build_likelihood_texts
from experiments.phase5.nulls import build_model_nulls
from experiments.rundir import RunDir
from steering.likelihood import likelihood_outcomes
from steering.models import LoadedModel
from steering.vector import Direction


def texts_for(run_dir: RunDir, config: ExperimentConfig, graph: ConceptGraph) -> LikelihoodTexts:
    """The run's likelihood texts: the folder's copy, else built (and saved). They pair
    texts by word count, so they need no tokenizer and a rescore rebuilds them exactly."""
    path = run_dir.file(RunDir.LIKELIHOOD_TEXTS)
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        return LikelihoodTexts(data["on"], data["off"], data["off_source"], data["seed"])
    texts = build_likelihood_texts(graph, config.likelihood.texts, config.seed)
    run_dir.write_json(RunDir.LIKELIHOOD_TEXTS, texts.to_dict())
    return texts


def score_likelihood(
    config: ExperimentConfig,
    graph: ConceptGraph,
    lm: LoadedModel,
    vectors: VectorSet,
    run_dir: RunDir,
    betas: dict[str, float] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> int:
    """Score every concept not yet in ``likelihood.jsonl``; returns the concepts scored."""
    texts = texts_for(run_dir, config, graph)
    done = {r["concept"] for r in run_dir.read_likelihood()}
    todo = [c.synset for c in graph.concepts if c.synset not in done]
    if not todo:
        return 0
    lk = config.likelihood
    nulls = build_model_nulls(lm, graph, vectors, config.seed, lk.neutral_nulls, lk.other_nulls)
    strengths = [s for s in config.steering.strengths if s != 0]
    for i, synset in enumerate(todo):
        say(f"likelihood outcome: {synset} ({i + 1} of {len(todo)})")
        arms = [("concept", vectors.vectors[synset])]
        arms += [(f"random:{j}", v) for j, v in enumerate(vectors.random.get(synset, []))]
        arms += nulls.get(synset, [])
        # a run resolves steering.beta auto to a number first (strength_range.choose_beta)
        beta = cast(float, (betas or {}).get(synset, config.steering.beta))
        records = likelihood_outcomes(
            lm,
            vectors.layer,
            beta * vectors.alpha,
            {synset: texts.on[synset]},
            {synset: texts.off[synset]},
            [Direction(synset, arm, v.direction) for arm, v in arms],
            strengths,
            config.steering.mode,
            lk.prefix,
            batch_size=lk.batch_size,
        )
        run_dir.append_likelihood({**r, "beta": beta} for r in records)
    return len(todo)
