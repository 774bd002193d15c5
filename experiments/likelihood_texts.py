"""Fixed short texts per concept for the likelihood outcome and the scale of Δ.

How the texts are made (a pure function of the concept graph and a seed, no model):

* **on-concept texts**: each concept's name, lemmas and the names of the synsets under
  it (hyponyms, instance hyponyms, member meronyms: "examples of" it) or above it
  (hypernyms) are filled into a pool of everyday sentences tagged ``likelihood``
  (:data:`LIKELIHOOD_TEMPLATES`, one pool for nouns and one for verbs). Text i of every
  concept comes from template i, so all concepts share one set of sentence frames;
  the seed only picks which lemma and which related names fill them. No gloss and no
  WordNet example sentence is used: those are what the centroid and the probes'
  definition texts are made of, and a text quoting them would make Δ's reference gap
  and the likelihood contrast partly measure a copy of the training material.
* **off-concept texts**: for concept A's text i, another concept's text from the same
  template whose length is closest (ties and the choice between concepts seeded,
  preferring concepts not yet used for A) and that does not mention A (its lemmas or
  their content words, :func:`experiments.concepts.mentions`). Pair i is then the same
  sentence frame about A and about something else, length-matched, which is what the
  paired likelihood contrast and its split-half reliability (halves of the pairs)
  need. ``length`` can be a tokenizer's count; the default counts words. A concept no
  other concept's text can pair with (a run of one concept) is an error, or, with
  ``unpaired=True`` (Phase 5), keeps its on-concept texts and no off-concept ones, with
  the reason (``LikelihoodTexts.unpaired``): its contrasts are not evaluable, and the run
  goes on.
* **disjointness**: no text equals, contains or is contained in (case-insensitive) any
  probe training, validation or test text (at the largest sizes any config can ask for),
  centroid text, format-axis text, α-scale neutral text or generation prompt of the
  same graph and seed (:func:`reserved_texts`); a candidate that would be is skipped
  and :func:`check_disjoint` re-checks the result. No template word is a concept word
  of either committed graph (checked by the tests), so a frame never mentions another
  concept by itself.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

from experiments.concepts import Concept, ConceptGraph, concept_words, mentions
from experiments.prompts import (
    GENERATION_PROMPTS,
    PromptError,
    article,
    capitalised,
    centroid_texts,
    format_axis_texts,
    max_train_texts,
    named_fields,
    pos_key,
    probe_eval_set,
    probe_training_set,
    render_generation_prompts,
    scale_neutral_texts,
    template_sequence,
)

TEXTS_PER_CONCEPT = 10
RESERVED_CENTROID_TEXTS = 20  # centroid texts reserved per set (the default uses 5)

# Fields: name, Name, a_name, A_name, lemma (any lemma), example / example2 (names of two
# distinct synsets under the concept), hypernym, a_hypernym. A template whose fields a
# concept lacks is skipped for it. No word here may be a concept word of a committed graph.
LIKELIHOOD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "n": (
        "We spent the whole morning reading up on {name}.",
        "{Example} and {example2} are two examples of {a_name}.",
        "The field guide lists {example} as {a_name}.",
        "My grandfather knew a lot about {lemma} and {example}.",
        "Students of {name} usually start with {example}.",
        "In her notebook she drew {a_name} next to {a_hypernym}.",
        "The old encyclopedia puts {example} among the kinds of {name}.",
        "There is more to {name} than most readers expect.",
        "His favourite example of {a_name} is {example}.",
        "Every chapter of that book returns to {lemma}.",
        "A short film about {example} showed why it counts as {a_name}.",
        "The museum guide stopped to talk about {name} for an hour.",
    ),
    "v": (
        "They had to {lemma} the plan at the last minute.",
        "It is hard to {name} old habits.",
        "She wanted to {lemma} everything in the room.",
        "To {example} something is one way to {name} it.",
        "Nobody expected the weather to {name} so fast.",
        "He will {lemma} the design again tomorrow.",
        "We could {example} it, or {lemma} it some other way.",
        "Things {name} when you least expect it.",
        "Please do not {lemma} the settings on my computer.",
        "The new rules will {name} how the city works.",
        "I watched her {example} the old engine.",
        "Nobody could {lemma} his mind once it was made up.",
    ),
}
EXAMPLE_RELATIONS = ("hyponyms", "instance_hyponyms", "member_meronyms")
HYPERNYM_RELATIONS = ("hypernyms", "instance_hypernyms")


class NoOffTexts(PromptError):
    """No other concept's text can be a concept's off-concept partner (one concept alone,
    or every other text mentions it)."""


@dataclass(frozen=True)
class LikelihoodTexts:
    """Per concept: on-concept texts and off-concept texts paired with them by position."""

    on: dict[str, list[str]]
    off: dict[str, list[str]]
    off_source: dict[str, list[str]]  # the concept each off-concept text is about
    seed: int
    # concepts with no off-concept texts (their ``off`` is empty), and why
    unpaired: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        if not self.unpaired:  # the file of a run whose concepts are all paired, as before
            del out["unpaired"]
        return out


def _names(concept: Concept, relations: Sequence[str]) -> list[str]:
    own = {concept.name}
    return sorted({item.name for r in relations for item in concept.related.get(r, [])} - own)


def _fields(concept: Concept, rng: random.Random) -> dict[str, str]:
    fields = {
        **named_fields("name", concept.name),
        "lemma": rng.choice(list(concept.lemmas)) if concept.lemmas else concept.name,
    }
    examples = _names(concept, EXAMPLE_RELATIONS)
    if examples:
        first, *rest = rng.sample(examples, min(2, len(examples)))
        fields.update(example=first, Example=capitalised(first))
        if rest:
            fields["example2"] = rest[0]
    hypernyms = _names(concept, HYPERNYM_RELATIONS)
    if hypernyms:
        hypernym = rng.choice(hypernyms)
        fields.update(hypernym=hypernym, a_hypernym=article(hypernym) + hypernym)
    return fields


def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def reserved_texts(graph: ConceptGraph, seed: int = 0) -> set[str]:
    """Every text the suite trains, thresholds, tests, centres or scales on, normalised:
    probe sets at the largest sizes any config can ask for, centroid texts (20 per set),
    the format-axis pairs, the α-scale neutral texts and the rendered generation prompts."""
    reserved: set[str] = set()
    n_train = max_train_texts()
    for concept in graph.concepts:
        examples = list(probe_training_set(concept, graph, n_train, n_train, n_train, seed))
        for split in ("validation", "test"):
            n_eval = len(template_sequence(split, seed, concept.synset))
            examples += probe_eval_set(concept, graph, n_eval, seed, split)
        reserved |= {e.text for e in examples}
        for texts in centroid_texts(concept, RESERVED_CENTROID_TEXTS, seed).values():
            reserved |= set(texts)
        reserved |= set(render_generation_prompts(concept, GENERATION_PROMPTS))
    questions, statements = format_axis_texts(graph)
    reserved |= set(questions) | set(statements) | set(scale_neutral_texts(graph, seed))
    return {_normalise(t) for t in reserved}


def conflicts(text: str, reserved: Iterable[str]) -> list[str]:
    """The reserved texts that ``text`` equals, contains or is contained in."""
    mine = _normalise(text)
    return [r for r in reserved if mine == r or mine in r or r in mine]


def check_disjoint(texts: Iterable[str], reserved: Iterable[str]) -> None:
    """Raise PromptError naming every text that equals, contains or is contained in a
    reserved (probe, centroid, scale or prompt) text."""
    reserved = list(reserved)
    bad = {t: found for t in texts if (found := conflicts(t, reserved))}
    if bad:
        shown = "; ".join(f"{t!r} ~ {found[0]!r}" for t, found in sorted(bad.items())[:5])
        raise PromptError(f"{len(bad)} likelihood texts overlap reserved texts: {shown}")


def on_concept_texts(
    concept: Concept,
    n: int = TEXTS_PER_CONCEPT,
    seed: int = 0,
    reserved: Iterable[str] = (),
) -> list[tuple[str, str]]:
    """(template id, text) for the concept's first ``n`` usable templates, in order; the
    id is the pool ("n" or "v") and the template's position in it, e.g. "n03". A concept
    whose fields fill fewer frames (your own concepts without narrower terms) gets fewer,
    with a warning, down to the two a split-half needs."""
    rng = random.Random(f"{seed}|likelihood|{concept.synset}")
    reserved = list(reserved)
    pos = pos_key(concept)
    out: list[tuple[str, str]] = []
    for i, template in enumerate(LIKELIHOOD_TEMPLATES[pos]):
        try:  # fresh lemma and related names per frame, so the texts vary
            text = template.format_map(_fields(concept, rng))
        except KeyError:
            continue  # the concept lacks a field this frame needs
        if text not in (t for _, t in out) and not conflicts(text, reserved):
            out.append((f"{pos}{i:02d}", text))
        if len(out) == n:
            return out
    missing = "examples under it ('narrower' in a concept file)" + (
        "" if _names(concept, HYPERNYM_RELATIONS) else " or above it ('broader')"
    )
    if len(out) < 2:  # a split-half needs two
        raise PromptError(
            f"{concept.synset}: only {len(out)} likelihood texts could be made, {n} asked; "
            f"most sentence frames need {missing}"
        )
    warnings.warn(  # own concepts without narrower terms: fewer pairs, not a failed run
        f"{concept.synset}: {len(out)} of {n} likelihood texts (the other frames need {missing})",
        stacklevel=2,
    )
    return out


def pick_off(
    concept: Concept,
    on: list[tuple[str, str]],
    pool: dict[str, list[tuple[str, str]]],
    length: Callable[[str], int],
    rng: random.Random,
    avoid: set[str] | None = None,
) -> tuple[list[str], list[str]]:
    """For each (frame id, text) of ``on``: another concept's text of the same frame
    (any frame when none is left), length-matched, spreading over concepts, that mentions
    none of ``avoid`` (default: the concept's words). Returns (texts, their concepts)."""
    avoid = concept_words(concept.lemmas) if avoid is None else avoid
    candidates = [
        (other, i, text)
        for other, texts in pool.items()
        if other != concept.synset
        for i, text in texts
        if not mentions(text, avoid)
    ]
    if not candidates:
        raise NoOffTexts(f"{concept.synset}: no other concept's text avoids mentioning it")
    rng.shuffle(candidates)  # seeded tie-breaks
    used: dict[str, int] = {}
    taken: set[str] = set()
    texts, sources = [], []
    for template, text in on:
        target = length(text)
        free = [c for c in candidates if c[2] not in taken]
        same = [c for c in free if c[1] == template] or free
        if not same:
            raise PromptError(f"{concept.synset}: too few off-concept texts to pair with")
        best = min(same, key=lambda c: (used.get(c[0], 0), abs(length(c[2]) - target)))
        used[best[0]] = used.get(best[0], 0) + 1
        taken.add(best[2])
        texts.append(best[2])
        sources.append(best[0])
    return texts, sources


def build_likelihood_texts(
    graph: ConceptGraph,
    n: int = TEXTS_PER_CONCEPT,
    seed: int = 0,
    length: Callable[[str], int] | None = None,
    reserved: set[str] | None = None,
    unpaired: bool = False,
) -> LikelihoodTexts:
    """On- and paired off-concept texts for every concept of ``graph`` (see the module
    docstring for how they are made); disjoint from :func:`reserved_texts`. ``unpaired``:
    a concept no other concept's text can pair with gets no off-concept texts and its
    reason in ``LikelihoodTexts.unpaired``, instead of :class:`NoOffTexts`."""
    if n < 2:
        raise PromptError(f"a split-half needs at least 2 texts per concept, got {n}")
    length = length or (lambda text: len(text.split()))
    reserved = reserved_texts(graph, seed) if reserved is None else reserved
    pool = {c.synset: on_concept_texts(c, n, seed, reserved) for c in graph.concepts}
    on, off, sources = {}, {}, {}
    why: dict[str, str] = {}
    for concept in graph.concepts:
        rng = random.Random(f"{seed}|likelihood-off|{concept.synset}")
        on[concept.synset] = [t for _, t in pool[concept.synset]]
        try:
            off[concept.synset], sources[concept.synset] = pick_off(
                concept, pool[concept.synset], pool, length, rng
            )
        except NoOffTexts as exc:
            if not unpaired:
                raise
            alone = " (the run has no other concept)" if len(graph.concepts) == 1 else ""
            off[concept.synset], sources[concept.synset] = [], []
            why[concept.synset] = f"{exc}{alone}"
    check_disjoint({t for texts in on.values() for t in texts}, reserved)
    return LikelihoodTexts(on, off, sources, seed, why)
