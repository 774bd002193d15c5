"""Stage: scored generations, everything computed from the saved text.

Δ and the three similarities against the concept's centroids, term counts and the
coherence checks: the fields of :class:`~experiments.rows.ScoreRecord`, each computed
as the field declares. No language-model forward pass happens here (perplexity comes from
the NLL saved by the generation stage), so ``steer-eval rescore`` reruns this stage on
a finished run in seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from experiments.concepts import Concept, ConceptGraph
from experiments.config import CPU_BATCH_ROWS, MetricsConfig, RunConfig
from experiments.prompts import centroid_texts
from experiments.rows import ScoreRecord
from metrics.semantic import SETS, Centroids, build_centroids, cross_deltas, score
from metrics.text import CoherenceReport, coherence_report

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer


@dataclass
class Scorer:
    """Centroids per concept plus the thresholds that turn numbers into labels."""

    config: RunConfig
    graph: ConceptGraph
    centroids: dict[str, Centroids]
    embedder: SentenceTransformer

    def texts(self) -> dict[str, dict[str, list[str]]]:
        """The centroid texts, for ``centroid_texts.json`` (an audit trail of Δ)."""
        return {k: {name: list(v.texts[name]) for name in SETS} for k, v in self.centroids.items()}


def build_scorer(config: RunConfig, graph: ConceptGraph, embedder: SentenceTransformer) -> Scorer:
    """Embed every concept's core, boundary and negative texts in one pass."""
    from metrics.embedder import embed

    texts = {
        c.synset: centroid_texts(c, n=config.centroids.texts_per_centroid, seed=config.seed)
        for c in graph.concepts
    }
    flat = [t for sets in texts.values() for name in SETS for t in sets[name]]
    emb = embed(embedder, flat)
    centroids, i = {}, 0
    for synset, sets in texts.items():
        by_set = {}
        for name in SETS:
            by_set[name] = emb[i : i + len(sets[name])]
            i += len(sets[name])
        centroids[synset] = build_centroids(by_set, sets)
    return Scorer(config, graph, centroids, embedder)


@dataclass
class ScoredText:
    """What a score field's ``compute`` reads about one text (experiments.rows)."""

    text: str
    prompt: str
    concept: Concept
    nll: float | None
    sims: tuple[float, float, float]  # cosine with the core, boundary, negative centroid
    delta: float
    delta_by_concept: dict[str, float]
    metrics: MetricsConfig

    @cached_property
    def coherence(self) -> CoherenceReport:
        return coherence_report(self.text, self.prompt)


def score_chunk(scorer: Scorer, generations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Score records (keyed by ``key``) for one chunk of generation records.

    Besides Δ against the row's own concept, every text gets Δ against every concept of
    the graph (``delta_by_concept``), from which the specificity matrix is built without
    generating anything more. The fields and how each is computed are declared on
    :class:`~experiments.rows.ScoreRecord`.
    """
    from metrics.embedder import embed

    emb = embed(scorer.embedder, [g["text"] if g["text"].strip() else " " for g in generations])
    # on the embedder's device: a CUDA run scores the specificity matrix on the card
    cross = cross_deltas(emb, scorer.centroids, str(getattr(scorer.embedder, "device", "cpu")))
    out = []
    for i, (g, e) in enumerate(zip(generations, emb, strict=True)):
        concept = scorer.graph.get(g["concept"])
        sims = score(e[None, :], scorer.centroids[concept.synset])
        text = ScoredText(
            text=g["text"],
            prompt=g["prompt"],
            concept=concept,
            nll=g.get("nll"),
            sims=(float(sims.core_sim[0]), float(sims.boundary_sim[0]), float(sims.neg_sim[0])),
            delta=float(sims.delta[0]),
            delta_by_concept={k: float(v[i]) for k, v in cross.items()},
            metrics=scorer.config.metrics,
        )
        out.append(ScoreRecord.of(g["key"], text).row())
    return out


def score_all(scorer: Scorer, generations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Score every generation, embedding in the chunks the generation stage produced.

    Chunks follow the generation batches (split, prompt length, key; ``batch_size`` rows),
    because a sentence embedding can differ in the last bits with the batch it is padded
    in; scoring the same chunks makes a rescore bit-identical to the original run. With
    ``batch_size: auto`` (sized by the card's memory) the chunks are 96 rows, wherever
    the scoring runs.
    """
    size = scorer.config.generation.batch_size
    if not isinstance(size, int):  # auto: fixed chunks, so a rescore anywhere matches
        size = CPU_BATCH_ROWS
    out: list[dict[str, Any]] = []
    for split in ("selection", "report"):  # each split as its generation stage batched it
        ordered = sorted(
            (g for g in generations if g.get("split", "report") == split),
            key=lambda g: (g["n_prompt_tokens"], g["key"]),
        )
        for start in range(0, len(ordered), size):
            out.extend(score_chunk(scorer, ordered[start : start + size]))
    return out
