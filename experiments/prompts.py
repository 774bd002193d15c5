"""Templated texts for probes, centroids and generation: pure functions of a concept and a seed.

Why partitioned pools: the original research evaluated its classifiers on texts re-drawn from the
training templates, so its F1 partly measured template memorisation. Here every source of text
is split once, by construction, not by chance:

* probe training texts use TRAIN templates, probe evaluation texts use EVAL templates (no
  template in both);
* a concept's negatives are split by position (see :func:`split_negatives`): evaluation,
  centroid and training negatives are different synsets;
* neutral texts come from separate fixed sentences and separate halves of the graph's neutral
  pool.

So training and evaluation never share a text, whatever the sizes or seeds (checked by
:func:`assert_disjoint` and the tests).

Negative probe texts reuse the positive templates of the same split (negative ``i`` gets the same
template as positive ``i``), so that a probe can only separate the classes by the concept, not by
the wording. With one example per class this gives the pilot's "What is X?" / "What is <distant
concept>?" pair (NOTES.md section 4).

The core centroid is built from definitional texts only and never contains a generation prompt:
the original core centroid included "Tell me about X.", so outputs that merely echoed the prompt
scored highest. :func:`centroid_texts` refuses to return such texts.

The module is longer than 500 lines because it holds the template tables themselves,
which are easier to audit for leaks between splits when they sit in one place.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from experiments.concepts import Concept, ConceptGraph, NegativeConcept, concept_words, mentions

Kind = Literal["positive", "negative", "neutral"]
LABELS: dict[str, int] = {"positive": 1, "negative": 0, "neutral": 0}

GENERATION_PROMPTS: tuple[str, ...] = (
    "Tell me about {concept}.",
    "Tell me about something.",
    "Here is a story:",
)
# Fragments of the generation prompts that no centroid text may contain.
_GENERATION_FRAGMENTS: tuple[str, ...] = ("tell me about", "here is a story")

# Negative layout (positions in Concept.negatives, which the build shuffled with its seed).
EVAL_NEGATIVES = 20
CENTROID_NEGATIVES = 10


class PromptError(ValueError):
    """Texts cannot be built as asked (too few templates, negatives or neutral sentences)."""


@dataclass(frozen=True)
class ProbeExample:
    """One labelled probe text; ``source`` says split, kind, template and subject synset."""

    text: str
    label: int
    kind: Kind
    source: str


@dataclass(frozen=True)
class NegativeSplit:
    """A concept's negatives, split into disjoint groups by position."""

    train: list[NegativeConcept]
    eval: list[NegativeConcept]
    centroid: list[NegativeConcept]


# ---------------------------------------------------------------------------
# Templates. Fields: name, Name, a_name, A_name (with article), lemma (any lemma), other_lemma
# (a lemma other than the name), gloss, example, hypernym, a_hypernym, hyponym, a_hyponym.
# A template whose fields a subject lacks (no example, no hypernym...) is skipped for it.
# ---------------------------------------------------------------------------

TRAIN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "n": (
        "What is {name}?",  # must stay first: the pilot's 1x1x1 positive
        "What is {a_name}?",
        "Explain what {a_name} is.",
        'What does the word "{lemma}" mean?',
        "Describe {a_name} in one sentence.",
        "Give a definition of {name}.",
        "What is meant by {lemma}?",
        "Can you explain {name} to me?",
        "{A_name} is {gloss}.",
        "I would like to know more about {name}.",
        "Which word names {gloss}? {Name}.",
        "Question: what kind of thing is {a_name}?",
    ),
    "v": (
        "What is {name}?",
        "What does it mean to {name}?",
        'Explain the verb "{lemma}".',
        'What does the word "{lemma}" mean?',
        "Describe what it is to {name}.",
        "Give a definition of the verb {name}.",
        "What is meant by {lemma}?",
        "Can you explain {name} to me?",
        "To {name} is to {gloss}.",
        "I would like to know more about {name}.",
        "Which verb means to {gloss}? {Name}.",
        "Question: how would you use the verb {lemma}?",
    ),
}

EVAL_TEMPLATES: dict[str, tuple[str, ...]] = {
    "n": (
        "In the dictionary, {name} is defined as {gloss}.",
        "I read somewhere that {a_name} is {gloss}.",
        'The word "{lemma}" refers to {gloss}.',
        "Here is a fact: {a_name} is {gloss}.",
        "Our teacher spent the whole lesson on {name}.",
        "She wrote a long essay about {name}.",
        "Everyone at the table had something to say about {name}.",
        "The encyclopedia entry on {name} runs for several pages.",
        'When people say "{lemma}", they mean {gloss}.',
        "In simple terms, {a_name} is {gloss}.",
        "The museum opened a new exhibit on {name}.",
        "He looked up {name} in an old reference book.",
        "My notes on {name} say: {gloss}.",
        "The documentary was entirely about {name}.",
        "Think of {a_name}, which is {gloss}.",
        "A short summary of {name}: {gloss}.",
        "The lecture covered {name} in detail.",
        "We had a long conversation about {name} last night.",
        "{Name} was the topic of the first chapter.",
        "The children asked many questions about {name}.",
        "There is a chapter on {name} in this book.",
        "You can learn a lot by studying {name}.",
        "The article explained {name} clearly.",
        "Few topics are as interesting as {name}.",
        "Another word for {name} is {other_lemma}.",
        'As in the sentence: "{example}".',
        "{A_name} is a kind of {hypernym}.",
        "One example of {a_name} is {a_hyponym}.",
    ),
    "v": (
        "In the dictionary, to {name} is defined as to {gloss}.",
        "I read somewhere that to {name} means to {gloss}.",
        'The verb "{lemma}" means to {gloss}.',
        "Here is a fact: to {name} is to {gloss}.",
        "Our teacher spent the whole lesson on the verb {name}.",
        "She wrote a long essay about what it means to {name}.",
        "Everyone at the table had a story about having to {name}.",
        "The encyclopedia explains what it means to {name}.",
        'When people say "{lemma}", they mean to {gloss}.',
        "In simple terms, to {name} is to {gloss}.",
        "They decided it was time to {name}.",
        "He looked up the verb {name} in an old reference book.",
        "My notes on the verb {name} say: {gloss}.",
        "The documentary showed how to {name}.",
        "Sometimes you simply have to {name}.",
        "A short summary of {name}: to {gloss}.",
        "The lecture covered the verb {name} in detail.",
        "We talked for hours about how to {name}.",
        "Learning to {name} was the topic of the first chapter.",
        "The children asked why anyone would {name}.",
        "There is a chapter on how to {name} in this book.",
        "You can learn a lot by watching others {name}.",
        "The article explained when to {name}.",
        "It is not always easy to {name}.",
        "Another way to say {name} is {other_lemma}.",
        'As in the sentence: "{example}".',
        "To {name} is a way to {hypernym}.",
        "One way to {name} is to {hyponym}.",
    ),
}

# Fixed, concept-free neutral sentences (no people, no animals or plants, no change verbs).
TRAIN_NEUTRAL_SENTENCES: tuple[str, ...] = (
    "The weather was mild and the streets were quiet.",
    "The train arrived ten minutes late this morning.",
    "The library closes at six on Sundays.",
    "A cup of tea was cooling on the kitchen table.",
    "The meeting room on the third floor has a broken projector.",
    "Rain is expected for most of the weekend.",
    "The road to the coast was closed for repairs.",
    "The recipe calls for two eggs and a spoonful of sugar.",
    "The clock in the hallway runs a little fast.",
    "Entry to the gallery is free on the first Monday of the month.",
)
EVAL_NEUTRAL_SENTENCES: tuple[str, ...] = (
    "The bus stop on the corner was moved last year.",
    "A light breeze came in through the open window.",
    "The bakery sells out of bread by noon.",
    "The printer on the second floor is out of paper again.",
    "The concert was postponed because of the storm.",
    "The bridge is painted every ten years.",
    "Snow covered the hills by the end of the week.",
    "The report is due on Friday afternoon.",
    "The shop on the main street sells maps and postcards.",
    "The kettle clicked off just as the phone rang.",
    "The parking lot was nearly empty on Sunday.",
    "A new coat of paint made the hallway brighter.",
    "The package arrived two days earlier than expected.",
    "The river was calm under the old stone bridge.",
    "The elevator was out of service all afternoon.",
    "The soup needed a little more salt.",
    "The schedule for next month is posted by the door.",
    "The lamp in the study flickers when it rains.",
    "The tickets went on sale at nine in the morning.",
    "The gate at the end of the lane squeaks in the wind.",
)
# Sentences about a neutral-pool item (a noun far from every concept of the graph).
TRAIN_NEUTRAL_TEMPLATES: tuple[str, ...] = (
    "A note about {name} was left on the desk.",
    "The newspaper printed a short piece on {name}.",
)
EVAL_NEUTRAL_TEMPLATES: tuple[str, ...] = (
    "A link about {name} arrived in the inbox this morning.",
    "There was a quiz question about {name} on the radio.",
)

CORE_TEMPLATES: dict[str, tuple[str, ...]] = {
    "n": (
        "{Name}: {gloss}.",
        "Define {name}. It is {gloss}.",
        "{A_name} is {gloss}.",
        "{Name}, also called {other_lemma}, is {gloss}.",
        "For example: {example}.",
        "The meaning of {name} is {gloss}.",
        "What is {name}? {A_name} is {gloss}.",
        "By definition, {a_name} is {gloss}.",
        "{A_name} is {a_hypernym}: {gloss}.",
        "{Name} refers to {gloss}.",
        "In short, {a_name} is {gloss}.",
    ),
    "v": (
        "{Name}: to {gloss}.",
        "Define {name}. It means to {gloss}.",
        "To {name} is to {gloss}.",
        "To {name}, also to {other_lemma}, is to {gloss}.",
        "For example: {example}.",
        "The meaning of {name} is to {gloss}.",
        "What does it mean to {name}? It means to {gloss}.",
        "By definition, to {name} is to {gloss}.",
        "To {name} is a way to {hypernym}: to {gloss}.",
        "{Name} refers to the act to {gloss}.",
        "In short, to {name} is to {gloss}.",
    ),
}

# Boundary (relational) phrasings per relation; {t} is the related synset's name.
_GENERIC_RELATION = ("{Name} is related to {t}.", "{Name} and {t} are connected.")
BOUNDARY_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "n": {
        "hypernyms": ("{Name} is a type of {t}.", "Every {name} is a kind of {t}."),
        "instance_hypernyms": ("{Name} is an instance of {t}.", "{Name} is one {t}."),
        "hyponyms": ("{T} is a type of {name}.", "{Name} includes {t}."),
        "instance_hyponyms": ("{T} is an instance of {name}.", "{Name} includes {t}."),
        "part_meronyms": ("{Name} has part {t}.", "{A_name} has {a_t} as a part."),
        "member_meronyms": ("{Name} has member {t}.", "{T} is a member of {name}."),
        "substance_meronyms": ("{Name} is made of {t}.", "{T} is a substance in {name}."),
        "part_holonyms": ("{Name} is part of {t}.", "{A_t} has {a_name} as a part."),
        "member_holonyms": ("{Name} is a member of {t}.", "{T} has member {name}."),
        "substance_holonyms": ("{Name} is a substance in {t}.", "{T} is made of {name}."),
        "attributes": ("{Name} is described by {t}.", "{T} is an attribute of {name}."),
        "antonyms": ("{Name} is the opposite of {t}.", "{T} is the opposite of {name}."),
        "topic_domains": ("{Name} belongs to the domain of {t}.", "{Name} is a term of {t}."),
        "in_topic_domains": ("{T} belongs to the domain of {name}.", "{T} is a term of {name}."),
        "region_domains": ("{Name} is used in {t}.", "{Name} is a term of {t}."),
        "usage_domains": ("{Name} is a {t} term.", "{Name} is labelled {t}."),
    },
    "v": {
        "hypernyms": ("To {name} is a way to {t}.", "To {name} is a kind of {t}."),
        "hyponyms": ("To {t} is a way to {name}.", "One way to {name} is to {t}."),
        "entailments": ("To {name} entails to {t}.", "If you {name}, you {t}."),
        "causes": ("To {name} causes to {t}.", "To {name} makes something {t}."),
        "verb_groups": ("To {name} is similar to {t}.", "{Name} and {t} are close in meaning."),
        "antonyms": ("To {name} is the opposite of to {t}.", "{T} is the opposite of {name}."),
        "topic_domains": ("{Name} belongs to the domain of {t}.", "{Name} is a term of {t}."),
        "region_domains": ("{Name} is used in {t}.", "{Name} is a term of {t}."),
        "usage_domains": ("{Name} is a {t} term.", "{Name} is labelled {t}."),
    },
}
# Relations tried first when picking boundary texts (the design's "type of", "has part",
# "related to"); the rest follow in ALL_RELATIONS order.
_BOUNDARY_PRIORITY = (
    "hypernyms",
    "instance_hypernyms",
    "part_meronyms",
    "member_meronyms",
    "part_holonyms",
    "member_holonyms",
    "substance_meronyms",
    "substance_holonyms",
    "entailments",
    "causes",
    "hyponyms",
    "instance_hyponyms",
)


# ---------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------


def _article(word: str) -> str:
    """'a' or 'an' by the first letter (good enough for templated text); none for names."""
    if not word or word[0].isupper():
        return ""
    return "an " if word[0].lower() in "aeiou" else "a "


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _strip_end(text: str) -> str:
    """Drop trailing spaces and final full stops; templates add their own punctuation."""
    return text.strip().rstrip(".").strip()


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _subject_fields(
    name: str,
    lemmas: Sequence[str],
    gloss: str,
    rng: random.Random,
    examples: Sequence[str] = (),
    hypernyms: Sequence[str] = (),
    hyponyms: Sequence[str] = (),
) -> dict[str, str]:
    """Template fields for one subject; optional fields are absent when the subject lacks them."""
    fields = {
        "name": name,
        "Name": _cap(name),
        "a_name": _article(name) + name,
        "A_name": _cap(_article(name) + name),
        "lemma": rng.choice(list(lemmas)) if lemmas else name,
        "gloss": _strip_end(gloss),
    }
    others = [lemma for lemma in lemmas if lemma.lower() != name.lower()]
    if others:
        fields["other_lemma"] = rng.choice(others)
    if examples:
        fields["example"] = _strip_end(rng.choice(list(examples)))
    if hypernyms:
        fields["hypernym"] = rng.choice(list(hypernyms))
        fields["a_hypernym"] = _article(fields["hypernym"]) + fields["hypernym"]
    if hyponyms:
        fields["hyponym"] = rng.choice(list(hyponyms))
        fields["a_hyponym"] = _article(fields["hyponym"]) + fields["hyponym"]
    return fields


def _render(template: str, fields: Mapping[str, str]) -> str | None:
    """The filled template, or None when a field it needs is missing or empty."""
    needed = _fields(template)
    if any(not fields.get(field) for field in needed):
        return None
    return template.format_map(fields)


def _rng(seed: int, *parts: str) -> random.Random:
    return random.Random("|".join([str(seed), *parts]))


def _related_names(concept: Concept, *relations: str) -> list[str]:
    return sorted({item.name for r in relations for item in concept.related.get(r, [])})


def _concept_fields(concept: Concept, rng: random.Random) -> dict[str, str]:
    return _subject_fields(
        concept.name,
        concept.lemmas,
        concept.gloss,
        rng,
        examples=concept.examples,
        hypernyms=_related_names(concept, "hypernyms", "instance_hypernyms"),
        hyponyms=_related_names(concept, "hyponyms", "instance_hyponyms"),
    )


def _negative_fields(negative: NegativeConcept, rng: random.Random) -> dict[str, str]:
    return _subject_fields(negative.name, negative.lemmas, negative.gloss, rng)


def _pos_key(concept: Concept) -> str:
    return "v" if concept.pos == "v" else "n"


# ---------------------------------------------------------------------------
# Splits
# ---------------------------------------------------------------------------


def split_negatives(concept: Concept) -> NegativeSplit:
    """Disjoint negatives for evaluation, centroids and training, by position.

    With 40 or more negatives (the default build): evaluation gets the first 20, the negative
    centroid the next 10 and probe training the rest (10 with 40). With fewer, evaluation gets
    half (at most 20), the centroid a quarter (at most 10) and training the rest; a group that
    would be empty borrows the training group's negatives (centroid) or raises (train, eval).
    """
    negatives = list(concept.negatives)
    total = len(negatives)
    n_eval = min(EVAL_NEGATIVES, total // 2)
    n_centroid = min(CENTROID_NEGATIVES, total // 4)
    split = NegativeSplit(
        eval=negatives[:n_eval],
        centroid=negatives[n_eval : n_eval + n_centroid],
        train=negatives[n_eval + n_centroid :],
    )
    if not split.eval or not split.train:
        raise PromptError(
            f"{concept.synset} has {total} negatives; probe sets need at least 2 "
            "(build the graph with the default n_negatives=40)"
        )
    return split


def _neutral_halves(graph: ConceptGraph | None) -> tuple[list, list]:
    """(train, eval) halves of the graph's neutral pool: the first half is for training."""
    pool = list(graph.neutral_pool) if graph is not None else []
    half = len(pool) // 2
    return pool[:half], pool[half:]


# ---------------------------------------------------------------------------
# Probe sets
# ---------------------------------------------------------------------------


def _fill(
    n: int,
    subjects: Sequence[str],
    templates: Sequence[tuple[int, str]],
    make_fields: Callable[[int], dict[str, str]],
    split: str,
    kind: Kind,
) -> list[ProbeExample]:
    """``n`` distinct texts: text ``i`` is about subject ``i mod S`` and uses template ``i mod T``.

    When that template needs a field the subject lacks (an example, a hypernym) or gives a text
    already made, the next templates are tried, so every subject gets its turn.
    ``make_fields(subject_index)`` draws fresh fields (e.g. another lemma) on each call.
    """
    out: list[ProbeExample] = []
    seen: set[str] = set()
    if n <= 0:
        return out
    if not subjects or not templates:
        raise PromptError(f"no {split} {kind} subjects or templates to build texts from")
    n_templates = len(templates)
    for i in range(2 * max(n, len(subjects)) * n_templates):
        subject = i % len(subjects)
        for step in range(n_templates):
            template_id, template = templates[(i + step) % n_templates]
            text = _render(template, make_fields(subject))
            if text is not None and text not in seen:
                seen.add(text)
                source = f"{split}:{kind}:t{template_id:02d}:{subjects[subject]}"
                out.append(ProbeExample(text=text, label=LABELS[kind], kind=kind, source=source))
                break
        if len(out) == n:
            return out
    raise PromptError(
        f"could build only {len(out)} of {n} distinct {split} {kind} texts; "
        f"ask for fewer (the {split} template pool has {n_templates} templates)"
    )


def _template_order(
    pos: str, pool: dict[str, tuple[str, ...]], rng: random.Random, fixed_first: bool
) -> list[tuple[int, str]]:
    """(index, template) pairs in seeded order; the training pool keeps "What is {name}?" first."""
    indexed = list(enumerate(pool[pos]))
    head, rest = (indexed[:1], indexed[1:]) if fixed_first else ([], indexed)
    rng.shuffle(rest)
    return head + rest


def _neutral_texts(
    concept: Concept,
    graph: ConceptGraph | None,
    n: int,
    split: str,
    seed: int,
) -> list[ProbeExample]:
    sentences = TRAIN_NEUTRAL_SENTENCES if split == "train" else EVAL_NEUTRAL_SENTENCES
    templates = TRAIN_NEUTRAL_TEMPLATES if split == "train" else EVAL_NEUTRAL_TEMPLATES
    train_pool, eval_pool = _neutral_halves(graph)
    pool = train_pool if split == "train" else eval_pool
    candidates: list[tuple[str, str]] = [
        (f"{split}:neutral:fixed{i:02d}", text) for i, text in enumerate(sentences)
    ]
    candidates += [
        (
            f"{split}:neutral:pool:{item.synset}",
            templates[i % len(templates)].format(name=item.name),
        )
        for i, item in enumerate(pool)
    ]
    rng = _rng(seed, "neutral", split, concept.synset)
    rng.shuffle(candidates)
    avoid = concept_words(concept.lemmas)
    out = [
        ProbeExample(text=text, label=LABELS["neutral"], kind="neutral", source=source)
        for source, text in candidates
        if not mentions(text, avoid)
    ][:n]
    if len(out) < n:
        raise PromptError(
            f"only {len(out)} {split} neutral texts are available for {concept.synset}, "
            f"{n} asked; the graph's neutral pool has {len(graph.neutral_pool) if graph else 0}"
        )
    return out


def _probe_set(
    concept: Concept,
    graph: ConceptGraph | None,
    split: str,
    n_pos: int,
    n_neg: int,
    n_neutral: int,
    seed: int,
) -> list[ProbeExample]:
    for label, value in (("n_pos", n_pos), ("n_neg", n_neg), ("n_neutral", n_neutral)):
        if value < 0:
            raise PromptError(f"{label} must be >= 0, got {value}")
    pos = _pos_key(concept)
    pool = TRAIN_TEMPLATES if split == "train" else EVAL_TEMPLATES
    order = _template_order(
        pos, pool, _rng(seed, "templates", split, concept.synset), fixed_first=split == "train"
    )
    field_rng = _rng(seed, "fields", split, concept.synset)
    positives = _fill(
        n_pos,
        [concept.synset],
        order,
        lambda _i: _concept_fields(concept, field_rng),
        split,
        "positive",
    )
    negatives_all = split_negatives(concept)
    negatives = list(negatives_all.train if split == "train" else negatives_all.eval)
    _rng(seed, "negatives", split, concept.synset).shuffle(negatives)
    negative_rng = _rng(seed, "negative-fields", split, concept.synset)
    negative_examples = _fill(
        n_neg,
        [neg.synset for neg in negatives],
        order,
        lambda i: _negative_fields(negatives[i], negative_rng),
        split,
        "negative",
    )
    neutral = _neutral_texts(concept, graph, n_neutral, split, seed)
    return positives + negative_examples + neutral


def probe_training_set(
    concept: Concept,
    graph: ConceptGraph | None,
    n_pos: int = 1,
    n_neg: int = 1,
    n_neutral: int = 1,
    seed: int = 0,
) -> list[ProbeExample]:
    """Probe training texts: positives, then negatives, then neutrals.

    The first positive is always "What is {name}?" and the first negative uses the same
    template on a training negative; the other templates, the negatives and the neutral texts
    are ordered by ``seed``. Labels: positive 1, negative and neutral 0.
    """
    return _probe_set(concept, graph, "train", n_pos, n_neg, n_neutral, seed)


def probe_eval_set(
    concept: Concept,
    graph: ConceptGraph | None,
    n_per_class: int = 20,
    seed: int = 0,
) -> list[ProbeExample]:
    """Held-out probe texts (``n_per_class`` of each kind) from EVAL templates only.

    Negatives are the concept's evaluation negatives (never used in training), neutrals come
    from the evaluation neutral sentences and the evaluation half of the neutral pool.
    """
    return _probe_set(concept, graph, "eval", n_per_class, n_per_class, n_per_class, seed)


def assert_disjoint(train: Sequence[ProbeExample], eval: Sequence[ProbeExample]) -> None:
    """Raise PromptError if any text (case-insensitive, stripped) is in both sets."""
    seen = {example.text.strip().lower() for example in train}
    shared = sorted({e.text for e in eval if e.text.strip().lower() in seen})
    if shared:
        raise PromptError(
            f"{len(shared)} probe texts are in both training and evaluation: {shared}"
        )


# ---------------------------------------------------------------------------
# Centroid texts
# ---------------------------------------------------------------------------


def _cycle_to(texts: list[str], n: int) -> list[str]:
    """Exactly ``n`` texts: truncate, or repeat the list in order when it is too short."""
    if not texts:
        raise PromptError("no texts to pad from")
    return [texts[i % len(texts)] for i in range(n)]


def _core_texts(concept: Concept, n: int, rng: random.Random) -> list[str]:
    out: list[str] = []
    templates = CORE_TEMPLATES[_pos_key(concept)]
    for round_ in range(max(1, n)):
        for template in templates:
            fields = _concept_fields(concept, rng)
            if "example" in _fields(template) and concept.examples:
                fields["example"] = _strip_end(concept.examples[(round_) % len(concept.examples)])
            text = _render(template, fields)
            if text is not None and text not in out:
                out.append(text)
            if len(out) == n:
                return out
    return _cycle_to(out, n)


def _boundary_pairs(concept: Concept, rng: random.Random) -> list[tuple[str, str]]:
    """(relation, related name) pairs, round-robin over relations so that each kind appears."""
    relations = [r for r in _BOUNDARY_PRIORITY if concept.related.get(r)]
    relations += sorted(r for r in concept.related if r not in relations and concept.related[r])
    queues: dict[str, list[str]] = {}
    for relation in relations:
        names = sorted({item.name for item in concept.related[relation]} - {concept.name})
        rng.shuffle(names)
        queues[relation] = names
    pairs: list[tuple[str, str]] = []
    while any(queues.values()):
        for relation in relations:
            if queues[relation]:
                pairs.append((relation, queues[relation].pop()))
    return pairs


def _boundary_texts(concept: Concept, n: int, rng: random.Random) -> list[str]:
    pos = _pos_key(concept)
    phrasings = BOUNDARY_TEMPLATES[pos]
    pairs = _boundary_pairs(concept, rng)
    base = {
        "name": concept.name,
        "Name": _cap(concept.name),
        "a_name": _article(concept.name) + concept.name,
        "A_name": _cap(_article(concept.name) + concept.name),
    }
    out: list[str] = []
    # Pass 0 uses each relation's first phrasing, pass 1 its second, pass 2 the generic ones.
    for variant in range(4):
        for relation, target in pairs:
            options = phrasings.get(relation, _GENERIC_RELATION)
            template = (options + _GENERIC_RELATION)[min(variant, len(options) + 1)]
            fields = dict(
                base,
                t=target,
                T=_cap(target),
                a_t=_article(target) + target,
                A_t=_cap(_article(target) + target),
            )
            text = _render(template, fields)
            if text is not None and text not in out:
                out.append(text)
            if len(out) == n:
                return out
    if not out:  # no relations at all: fall back to synonyms
        out = [f"{_cap(concept.name)} is also called {lemma}." for lemma in concept.lemmas[1:]]
        out = out or [f"{_cap(concept.name)} is related to other things."]
    return _cycle_to(out, n)


def _negative_texts(concept: Concept, n: int, rng: random.Random) -> list[str]:
    split = split_negatives(concept)
    negatives = list(split.centroid or split.train)
    rng.shuffle(negatives)
    out = [f"What is NOT {concept.name}?"]
    for variant in range(3):
        for negative in negatives:
            if len(out) == n:
                return out
            gloss = _strip_end(negative.gloss)
            a_neg = _cap(_article(negative.name) + negative.name)
            if concept.pos == "v":
                definition = f"To {negative.name} is to {gloss}."
            else:
                definition = f"{a_neg} is {gloss}."
            text = (
                f"{_cap(negative.name)}: {gloss}.",
                definition,
                f"The meaning of {negative.name} is {gloss}.",
            )[variant]
            if text not in out:
                out.append(text)
    return _cycle_to(out, n)[:n]


def centroid_texts(concept: Concept, n: int = 5, seed: int = 0) -> dict[str, list[str]]:
    """Texts for the three centroids, exactly ``n`` each: ``core``, ``boundary``, ``negative``.

    * core: definitions from the gloss, lemmas and WordNet examples ("{Name}: {gloss}.",
      "Define {name}. It is {gloss}.", "A {name} is {gloss}.", ...), never a generation prompt;
    * boundary: one text per relation in turn ("{Name} is a type of {hypernym}.", "{Name} has
      part {meronym}.", ...), related names chosen with ``seed``;
    * negative: "What is NOT {name}?" then definitions of the concept's centroid negatives
      (disjoint from probe training and evaluation negatives, see split_negatives).

    When a concept has too few relations, examples or negatives, other phrasings of the same
    facts are used first, and only then is the list repeated in order to reach ``n``.
    """
    if n < 1:
        raise PromptError(f"n must be at least 1, got {n}")
    texts = {
        "core": _core_texts(concept, n, _rng(seed, "core", concept.synset)),
        "boundary": _boundary_texts(concept, n, _rng(seed, "boundary", concept.synset)),
        "negative": _negative_texts(concept, n, _rng(seed, "negative", concept.synset)),
    }
    prompts = [p.lower() for p in render_generation_prompts(concept)]
    for key, items in texts.items():
        for text in items:
            lowered = text.lower()
            if any(p in lowered for p in prompts) or any(
                f in lowered for f in _GENERATION_FRAGMENTS
            ):
                raise PromptError(f"{key} centroid text contains a generation prompt: {text!r}")
    return texts


# ---------------------------------------------------------------------------
# Generation prompts
# ---------------------------------------------------------------------------


def render_generation_prompts(
    concept: Concept | str, templates: Sequence[str] = GENERATION_PROMPTS
) -> list[str]:
    """The generation prompts with ``{concept}`` replaced by the concept's name."""
    name = concept if isinstance(concept, str) else concept.name
    return [template.replace("{concept}", name) for template in templates]
