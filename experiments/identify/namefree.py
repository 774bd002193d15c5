"""Name-free texts (identify v2): detection and outcome without the concept's name.

Every probe test positive and every on-concept likelihood text names its concept, so a
direction that reads the *name* both detects and steers through one lexical channel.
Here the concept appears only through what falls under it (hyponyms, instances, members;
the parts of a place), never through its lemmas or their derived forms:

* the concept's related names are split, seeded, into two disjoint halves: one fills the
  name-free **test positives** (scored against the usual test negatives), the other the
  name-free **likelihood texts**, so the two outcomes share no word either;
* the likelihood texts are paired with another concept's name-free text from the same
  frame, length-matched, that mentions neither A's words nor any of A's related names
  (as ``likelihood_texts`` pairs the named ones);
* the frames are not the named pools' frames, and no frame word is a concept word.

A concept with fewer than two usable names in a half gets no name-free texts (NaN in
its rows, said in the record), rather than texts that would name it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from experiments.concepts import Concept, ConceptGraph, concept_words, mentions
from experiments.likelihood_texts import LikelihoodTexts, pick_off

NAME_RELATIONS = ("hyponyms", "instance_hyponyms", "member_meronyms", "part_meronyms")
DERIVED = ("derivationally_related_forms",)

# Fields: {x} one related name, {y} another. Noun and verb pools; the likelihood frames
# and the test frames are different sentences.
LIKELIHOOD_FRAMES: dict[str, tuple[str, ...]] = {
    "n": (
        "We spent the whole afternoon reading about {x}.",
        "My aunt knew a surprising amount about {x} and {y}.",
        "The little book had a chapter on {x}.",
        "There is more to {x} than most people expect.",
        "She kept coming back to {x} in her notes.",
        "The guide talked about {x} for almost an hour.",
        "He drew {x} in the margin of his notebook.",
        "They argued about {x} until the train arrived.",
        "A short film about {x} was shown that evening.",
        "Nobody at dinner had heard of {x} before.",
        "The radio host asked listeners about {x}.",
        "I finally understood {x} after the second lesson.",
    ),
    "v": (
        "They had to {x} it before the guests arrived.",
        "She decided to {x} the whole thing again.",
        "It took him an hour to {x} it properly.",
        "We watched them {x} it from across the street.",
        "Nobody wanted to {x} it on a Sunday.",
        "You should {x} it slowly and carefully.",
        "The children tried to {x} it on their own.",
        "I saw her {x} it twice last week.",
        "He promised to {x} it by the end of the day.",
        "They will {x} it again tomorrow morning.",
        "It is easier to {x} it than to {y} it.",
        "My neighbour likes to {x} things in the garden.",
    ),
}
TEST_FRAMES: dict[str, tuple[str, ...]] = {
    "n": (
        "A note about {x} was left on the kitchen table.",
        "Topic of the day: {x}.",
        "The article explained {x} clearly.",
        "A friend asked me about {x} after dinner.",
        "The exhibit included a section on {x}.",
        "She showed me a picture of {x}.",
        "The quiz had a question about {x}.",
        "Our teacher mentioned {x} twice today.",
        "I read a long piece about {x} yesterday.",
        "The lecture ended with a slide on {x}.",
    ),
    "v": (
        "I watched my uncle {x} it yesterday.",
        "They plan to {x} it next week.",
        "Did you {x} it already?",
        "She taught me how to {x} it.",
        "We had to {x} it in a hurry.",
        "He likes to {x} it in the morning.",
        "The manual explains how to {x} it.",
        "Nobody knew how to {x} it.",
        "Please {x} it once more.",
        "They stopped to {x} it on the way.",
    ),
}


def avoided_words(concept: Concept) -> set[str]:
    """The concept's words and those of its derived forms ("African" for Africa)."""
    derived = [item.name for r in DERIVED for item in concept.related.get(r, [])]
    return concept_words([*concept.lemmas, concept.name, *derived])


def name_halves(concept: Concept, seed: int) -> tuple[list[str], list[str]]:
    """(test names, likelihood names): the usable related names, split seeded in two."""
    avoid = avoided_words(concept)
    names = sorted(
        {item.name for r in NAME_RELATIONS for item in concept.related.get(r, [])} - {concept.name}
    )
    # a one-letter name ("A" under letter) would read as a word of any sentence
    names = [n for n in names if len(n) > 1 and not mentions(n, avoid)]
    random.Random(f"{seed}|name-free|{concept.synset}").shuffle(names)
    half = len(names) // 2
    return names[:half], names[half:]


def _fill(
    frames: Sequence[str], names: list[str], n: int, rng: random.Random, pos: str = "n"
) -> list[tuple[str, str]]:
    """(frame id, text) for up to ``n`` frames, names drawn without replacement first;
    the id is the pool and the frame's position (``n03``), as the named texts' are."""
    if len(names) < 2:
        return []
    out: list[tuple[str, str]] = []
    pool: list[str] = []
    for i, frame in enumerate(frames):
        if len(out) == n:
            break
        if len(pool) < 2:
            pool = rng.sample(names, len(names))
        x, y = pool.pop(), pool.pop()
        out.append((f"{pos}{i:02d}", frame.format(x=x, y=y)))
    return out


def name_free_positives(concept: Concept, n: int, seed: int) -> list[str]:
    """Up to ``n`` test positives that name only what falls under the concept."""
    names, _ = name_halves(concept, seed)
    rng = random.Random(f"{seed}|name-free-test|{concept.synset}")
    frames = TEST_FRAMES["v" if concept.pos == "v" else "n"]
    texts = [t for _, t in _fill(frames * (1 + n // len(frames)), names, n, rng)]
    return list(dict.fromkeys(texts))


def name_free_likelihood_texts(
    graph: ConceptGraph,
    concepts: Sequence[str],
    n: int,
    seed: int,
    length: Callable[[str], int] | None = None,
) -> LikelihoodTexts:
    """Name-free on-concept texts for ``concepts`` and their paired off-concept texts,
    drawn from every concept of ``graph`` (see the module docstring)."""
    length = length or (lambda text: len(text.split()))
    pool: dict[str, list[tuple[str, str]]] = {}
    for concept in graph.concepts:
        _, names = name_halves(concept, seed)
        rng = random.Random(f"{seed}|name-free-likelihood|{concept.synset}")
        pos = "v" if concept.pos == "v" else "n"
        pool[concept.synset] = _fill(LIKELIHOOD_FRAMES[pos], names, n, rng, pos)
    on, off, sources = {}, {}, {}
    for synset in concepts:
        concept = graph.get(synset)
        if len(pool[synset]) < 2:
            continue
        related = {n for half in name_halves(concept, seed) for n in half}
        rng = random.Random(f"{seed}|name-free-off|{synset}")
        on[synset] = [t for _, t in pool[synset]]
        off[synset], sources[synset] = pick_off(
            concept, pool[synset], pool, length, rng, avoid=avoided_words(concept) | related
        )
    return LikelihoodTexts(on, off, sources, seed)
