"""A rule-based stand-in for a human rater, for the tests of Part B's whole path
(export, rate, import); it never looks at Δ or the strength."""

from __future__ import annotations

import re
from pathlib import Path

from experiments.concepts import Concept, concept_words
from experiments.validation.human.answer_key import key_samples
from experiments.validation.human.rater import load_items, prepare_ratings_file, save_items
from experiments.validation.human.ratings import GENERIC_CONCEPT_WORDS, stem
from metrics.text import count_terms, words

_STOP = frozenset(
    "that this with from have having more less many some several usually various their "
    "them they which what when where about into onto other than then there these those "
    "make made cause any".split()
)


def _content_words(text: str) -> set[str]:
    return {stem(w) for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in _STOP}


def scripted_rating(text: str, concept: Concept) -> int:
    """A rule-based stand-in for a human, which never looks at Δ or the strength.

    * fewer than 3 words -> 0 (collapsed text relates to nothing);
    * concept mention (a lemma, or a content word of one, plurals included; rank words
      like "genus" excluded): +4 for the first, +2 for more than one;
    * related WordNet terms (hypernyms, hyponyms, parts, ...): +1 each, at most +3;
    * overlap with the gloss's content words: + 3 × the fraction present, rounded.

    Clipped to 0-10.
    """
    if len(words(text)) < 3:
        return 0
    own_terms = sorted(concept_words(concept.lemmas) - GENERIC_CONCEPT_WORDS)
    own = count_terms(text, own_terms)
    related = count_terms(text, concept.related_terms)
    gloss = _content_words(concept.gloss)
    overlap = len(gloss & _content_words(text)) / len(gloss) if gloss else 0.0
    score = (4 if own else 0) + (2 if own > 1 else 0) + min(3, related) + round(3 * overlap)
    return max(0, min(10, score))


def scripted_rate(
    csv_path: Path, key: dict, concepts: dict[str, Concept], out: Path | None = None
) -> Path:
    """Fill a ratings file with :func:`scripted_rating` (for the pipeline and its figures)."""
    path = prepare_ratings_file(csv_path, key, out)
    items = load_items(path, key)
    samples = key_samples(key)
    for item in items:
        item.rating = scripted_rating(item.text, concepts[samples[item.sample_id]["concept"]])
    save_items(path, items)
    return path
