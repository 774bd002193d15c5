"""A scale for Δ: the reference gap between on- and off-concept texts, per concept.

Δ has no natural unit: a steering effect of +0.08 cannot be called large or small on
its own (even the prompting baseline reaches only about +0.085). The reference gap is
what Δ says about texts known to be on or off the concept: the mean Δ of a concept's
on-concept likelihood texts minus that of their length-matched off-concept partners
(:mod:`experiments.likelihood_texts`), both against the concept's own centroids, with
the run's scorer. An effect divided by it is "the fraction of the way from an off-topic
text to an on-topic one" that steering moved the model's writing. The texts are
disjoint from the centroid texts, so the gap is not inflated by scoring copies of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from experiments.kernel.score import Scorer
from experiments.likelihood_texts import LikelihoodTexts
from metrics.semantic import score


@dataclass(frozen=True)
class ReferenceGap:
    """Δ of each on- and off-concept text against one concept's centroids (paired)."""

    concept: str
    on: tuple[float, ...]
    off: tuple[float, ...]

    @property
    def gap(self) -> float:
        return float(np.mean(self.on) - np.mean(self.off))

    @property
    def pair_gaps(self) -> np.ndarray:
        """Δ(on_i) − Δ(off_i): the units of the gap's split-half reliability and interval."""
        gaps: np.ndarray = np.asarray(self.on) - np.asarray(self.off)
        return gaps

    def to_dict(self) -> dict[str, object]:
        return {"concept": self.concept, "gap": self.gap, "on": self.on, "off": self.off}


def reference_gaps(scorer: Scorer, texts: LikelihoodTexts) -> dict[str, ReferenceGap]:
    """Per concept of ``texts`` that the scorer has centroids for and that has off-concept
    texts (a concept alone has none: ``LikelihoodTexts.unpaired``): its reference gap."""
    from metrics.embedder import embed

    concepts = [c for c in texts.on if c in scorer.centroids and texts.off[c]]
    unique = sorted({t for c in concepts for t in (*texts.on[c], *texts.off[c])})
    rows = {t: i for i, t in enumerate(unique)}
    embeddings = embed(scorer.embedder, unique)
    out = {}
    for concept in concepts:
        on = embeddings[[rows[t] for t in texts.on[concept]]]
        off = embeddings[[rows[t] for t in texts.off[concept]]]
        centroids = scorer.centroids[concept]
        out[concept] = ReferenceGap(
            concept,
            tuple(float(v) for v in score(on, centroids).delta),
            tuple(float(v) for v in score(off, centroids).delta),
        )
    return out
