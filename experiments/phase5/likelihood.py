"""Stage: the likelihood outcome of every steering direction (Pres et al. 2024).

For each concept: fixed on-concept texts and length-matched off-concept partners
(``experiments/likelihood_texts.py``: built from WordNet names, never glosses, and checked
disjoint from every probe, centroid, α-scale and prompt text). Every direction of the
concept steers every position at s·β·α: its own, its isotropic random ones, and nulls
from the model's own distribution (diffmeans of random neutral-text splits and other
concepts' directions, ``phase5/nulls.py``). Per text pair the outcome is
e = s·((L_s − L_0)(on) − (L_s − L_0)(off)), L the mean per-token log-likelihood,
teacher-forced: no sampling noise, so a concept's value is reliable from ten pairs, and
suppression shows at s < 0. A file steered as deployed (``steering.layers``,
``steering.scale``) is scored as generation steers it: every steered layer hooked in one
pass with each arm's per-layer vectors, at the file's coefficient k with ``scale: file``
(its nulls shaped alike, ``phase5/nulls.py``).

Records go to ``likelihood.jsonl`` concept by concept, so a resumed run skips concepts
already scored; the texts go to ``likelihood_texts.json`` (also written when the outcome
is off: they are Δ's reference texts). ``steer-eval rescore`` reads both, never the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import cast

from experiments.concepts import ConceptGraph
from experiments.config import RunConfig
from experiments.kernel.vectors import VectorSet
from experiments.likelihood_texts import LikelihoodTexts, build_likelihood_texts
from experiments.phase5.nulls import build_model_nulls
from experiments.rundir import RunDir
from steering.likelihood import UnsteeredLoglik, likelihood_outcomes
from steering.models import LoadedModel
from steering.vector import Direction


def texts_for(run_dir: RunDir, config: RunConfig, graph: ConceptGraph) -> LikelihoodTexts:
    """The run's likelihood texts: the folder's copy, else built (and saved). They pair
    texts by word count, so they need no tokenizer and a rescore rebuilds them exactly.
    A concept with no other concept's text to pair with (a run of one concept) has no
    off-concept texts, and its reason in ``unpaired``: its contrasts are not evaluable."""
    path = run_dir.file(RunDir.LIKELIHOOD_TEXTS)
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        unpaired = data.get("unpaired", {})  # absent: every concept is paired
        return LikelihoodTexts(data["on"], data["off"], data["off_source"], data["seed"], unpaired)
    texts = build_likelihood_texts(graph, config.likelihood.texts, config.seed, unpaired=True)
    run_dir.write_json(RunDir.LIKELIHOOD_TEXTS, texts.to_dict())
    return texts


def score_likelihood(
    config: RunConfig,
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
    for synset in [c for c in todo if not texts.off[c]]:  # nothing to contrast with
        say(f"likelihood outcome: {synset} not scored ({texts.unpaired[synset]})")
        todo.remove(synset)
    if not todo:
        return 0
    lk = config.likelihood
    nulls = build_model_nulls(lm, graph, vectors, config.seed, lk.neutral_nulls, lk.other_nulls)
    strengths = [s for s in config.steering.strengths if s != 0]
    unsteered = UnsteeredLoglik()
    for i, synset in enumerate(todo):
        say(f"likelihood outcome: {synset} ({i + 1} of {len(todo)})")
        vector = vectors.vectors[synset]
        arms = [("concept", vector)]
        arms += [(f"random:{j}", v) for j, v in enumerate(vectors.random.get(synset, []))]
        arms += nulls.get(synset, [])
        # a run resolves steering.beta auto to a number first (strength_range.choose_beta)
        beta = cast(float, (betas or {}).get(synset, config.steering.beta))
        # the coefficient of s = 1, as generation's plan takes it (SteeringVector.coefficients):
        # the file's k for its own vectors (scale file), else β·α
        scale = vector.coefficient if vector.coefficient is not None else beta * vectors.alpha
        records = likelihood_outcomes(
            lm,
            vectors.layers,
            scale,
            {synset: texts.on[synset]},
            {synset: texts.off[synset]},
            [Direction(synset, arm, v.added()) for arm, v in arms],
            strengths,
            config.steering.mode,
            lk.prefix,
            batch_size=lk.batch_size,
            unsteered=unsteered,
        )
        run_dir.append_likelihood({**r, "beta": beta} for r in records)
    return len(todo)
