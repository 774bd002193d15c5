"""The manipulations on the embedded Gemma 3 270M: v* detects, a rotation toward the
neutral-text principal components degrades detection, and v* steers the likelihood of
its concept's texts more than a direction orthogonal to it."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.config import load_config
from experiments.identify.stages.data import build_directions, collect
from experiments.identify.stages.detect import score_direction
from experiments.identify.study import with_concepts
from experiments.kernel.lifecycle import load_graph
from experiments.kernel.vectors import neutral_texts
from experiments.likelihood_texts import build_likelihood_texts
from steering.activations import pooled_activations, residual_scale
from steering.likelihood import likelihood_outcomes

pytestmark = pytest.mark.integration


def test_detection_falls_along_the_pc_rotation_and_v_star_steers(embedded_lm):

    lm = embedded_lm
    config, _ = with_concepts(
        load_config(
            "configs/identify.yaml",
            [
                "identify.limit=4",
                "identify.theta_degrees=[0, 90]",
                "identify.label_noise=[0]",
                "identify.logistic_c=[]",
                "identify.shrinkage=[1.0]",
                "identify.sizes=['16x16x16']",
            ],
        )
    )
    graph = load_graph(config)
    concepts = [c.synset for c in graph.concepts]
    layer = lm.default_layer
    data = collect(config, graph, concepts, lambda t: pooled_activations(lm, t, layer).numpy())
    directions = build_directions(config, data)
    auroc = {
        d: np.mean(
            [
                score_direction(
                    directions.get(c, d).array(), data.concepts[c].test, data.concepts[c].validation
                ).auroc
                for c in concepts
            ]
        )
        for d in ("reference", "rotation:pc:90", "rotation:isotropic:90")
    }
    assert auroc["reference"] > 0.8
    assert auroc["rotation:pc:90"] < auroc["reference"] - 0.1
    alpha = residual_scale(lm, neutral_texts(graph, config.seed), layer)
    texts = build_likelihood_texts(
        load_graph(
            config.model_copy(
                update={"concepts": config.concepts.model_copy(update={"synsets": None})}
            )
        ),
        6,
        0,
    )
    rows = likelihood_outcomes(
        lm,
        layer,
        0.2 * alpha,
        {c: texts.on[c] for c in concepts},
        {c: texts.off[c] for c in concepts},
        [directions.get(c, d) for c in concepts for d in ("reference", "rotation:isotropic:90")],
        [1.0],
        prefix=config.likelihood.prefix,
    )
    effect = {}
    for r in rows:
        effect.setdefault((r["concept"], r["arm"]), []).append(r["e"])
    wins = sum(
        np.mean(effect[(c, "reference")]) > np.mean(effect[(c, "rotation:isotropic:90")])
        for c in concepts
    )
    assert wins >= 3
