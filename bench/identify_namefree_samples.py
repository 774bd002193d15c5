"""Print sampled name-free texts (identify, ``namefree.py``) as JSON, for
``bench/identify_namefree_samples.md``: one test positive and one likelihood text for
each of ten concepts of the committed graphs (the i-th text of the i-th concept), seed 0.

    python bench/identify_namefree_samples.py > before_or_after.json
"""

from __future__ import annotations

import json
from pathlib import Path

from experiments.concepts import load_concepts
from experiments.identify.stages.namefree import name_free_likelihood_texts, name_free_positives

DATA = Path(__file__).resolve().parents[1] / "data" / "concepts"
SEED = 0
CONCEPTS = {
    "wordnet_top50.json": [
        "bird_genus.n.01",
        "herb.n.01",
        "device.n.01",
        "travel.v.01",
        "quality.n.01",
    ],
    "wordnet_51to100.json": [
        "room.n.01",
        "utter.v.02",
        "state.n.02",
        "dicot_family.n.01",
        "garment.n.01",
    ],
}


def main() -> None:
    out = []
    for file, synsets in CONCEPTS.items():
        graph = load_concepts(DATA / file)
        likelihood = name_free_likelihood_texts(graph, synsets, 10, seed=SEED)
        for synset in synsets:
            i = len(out)  # the i-th text of each list, so the samples show different frames
            positives = name_free_positives(graph.get(synset), 10, seed=SEED)
            on = likelihood.on.get(synset, [])
            out.append(
                {
                    "concept": synset,
                    "positive": positives[i % len(positives)] if positives else None,
                    "likelihood": on[i % len(on)] if on else None,
                }
            )
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
