"""Δ's reference gap: on-concept likelihood texts against their off-concept partners."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.concepts import load_concepts
from experiments.config import load_config
from experiments.kernel.score import build_scorer
from experiments.likelihood_texts import build_likelihood_texts
from experiments.phase5.reference_gap import reference_gaps
from metrics.embedder import embed
from metrics.semantic import score


def test_reference_gap_is_positive_and_recomputes_by_hand(embedder):
    config = load_config()
    graph = load_concepts(config.concepts.file, limit=config.concepts.limit)
    scorer = build_scorer(config, graph, embedder)
    texts = build_likelihood_texts(graph, seed=config.seed)
    gaps = reference_gaps(scorer, texts)
    assert set(gaps) == set(graph.synsets)
    positive = sum(g.gap > 0 for g in gaps.values())
    assert positive >= 8, {k: round(g.gap, 3) for k, g in gaps.items()}
    herb = gaps["herb.n.01"]
    on = score(embed(embedder, texts.on["herb.n.01"]), scorer.centroids["herb.n.01"]).delta
    assert herb.on == pytest.approx(tuple(on), abs=1e-6)
    assert herb.gap == pytest.approx(np.mean(herb.pair_gaps))
