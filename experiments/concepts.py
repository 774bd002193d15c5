"""The WordNet concept graph: the studied concepts, their relations, negatives and a neutral pool.

Why a frozen, committed JSON file: classifiers, centroids and steering runs must all see the
same concepts, the same negatives and the same neutral texts, so the graph is built once with a
seed (``steer-eval concepts``) and every later phase loads it with :func:`load_concepts`.

Relation lists from NLTK come back in an order that can change from run to run (they are built
from sets), so every list here is sorted; the build is deterministic for a given seed and
WordNet version, and :meth:`ConceptGraph.save` writes a byte-identical file each time.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

FORMAT = "steer-eval/concept-graph"
FORMAT_VERSION = 1
# The committed top-10 graph, found from the source tree so that any working directory works.
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "data" / "concepts" / "wordnet_top10.json"

# Relations between synsets (WordNet "semantic" pointers). NLTK exposes the same names on Lemma
# for the lexical (word-to-word) variant of each pointer; both are collected under one key.
SYNSET_RELATIONS: tuple[str, ...] = (
    "hypernyms",
    "instance_hypernyms",
    "hyponyms",
    "instance_hyponyms",
    "member_holonyms",
    "substance_holonyms",
    "part_holonyms",
    "member_meronyms",
    "substance_meronyms",
    "part_meronyms",
    "attributes",
    "entailments",
    "causes",
    "also_sees",
    "verb_groups",
    "similar_tos",
    "topic_domains",
    "in_topic_domains",
    "region_domains",
    "in_region_domains",
    "usage_domains",
    "in_usage_domains",
)
# Pointers that exist only between words (lemmas); their targets are mapped to their synsets.
LEMMA_RELATIONS: tuple[str, ...] = ("antonyms", "derivationally_related_forms", "pertainyms")
ALL_RELATIONS: tuple[str, ...] = SYNSET_RELATIONS + LEMMA_RELATIONS

# Relations whose lemmas do not count as "about the concept" in term counting: mentioning the
# opposite of a concept is not evidence of steering toward it.
TERM_EXCLUDED_RELATIONS: frozenset[str] = frozenset({"antonyms"})

# The counting rule that reproduces the original research's "WordNet top 10" (see top_synsets).
HATCAT_RULE_RELATIONS: tuple[str, ...] = (
    "hypernyms",
    "hyponyms",
    "part_meronyms",
    "substance_meronyms",
    "member_meronyms",
    "part_holonyms",
    "substance_holonyms",
    "member_holonyms",
    "similar_tos",
    "attributes",
    "entailments",
    "causes",
)
COUNTING_RULES: dict[str, tuple[str, ...]] = {
    "hatcat": HATCAT_RULE_RELATIONS,
    "all": SYNSET_RELATIONS,
}
RULE_DESCRIPTIONS: dict[str, str] = {
    "hatcat": (
        "synset-level links: hypernyms + hyponyms (instance links excluded) + part/substance/"
        "member meronyms and holonyms + similar_tos + attributes + entailments + causes"
    ),
    "all": "every synset-level WordNet pointer (all SYNSET_RELATIONS)",
}


NEGATIVE_RULE = (
    "random same-POS synsets at hypernym shortest_path_distance >= min_distance (None rejected; "
    "verbs joined by NLTK's simulated root), excluding the concept's ancestors, descendants, "
    "directly related and member-linked synsets (and anything below the latter) and any synset "
    "whose name or gloss mentions the concept's lemmas or their content words; "
    "neutral pool: nouns meeting the same rule against every concept (None accepted)"
)


class ConceptError(ValueError):
    """A concept id, build parameter or concept file is wrong; the message says how to fix it."""


# ---------------------------------------------------------------------------
# Data classes
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RelatedSynset:
    """One synset reached through a WordNet relation (kept with its lemmas for term counting)."""

    synset: str
    name: str
    lemmas: list[str]


@dataclass(frozen=True)
class NegativeConcept:
    """A distant synset of the same part of speech, used as a negative example."""

    synset: str
    name: str
    lemmas: list[str]
    gloss: str
    distance: int


@dataclass(frozen=True)
class NeutralItem:
    """A synset far from every concept in the graph, used for neutral (off-topic) texts."""

    synset: str
    name: str
    gloss: str


@dataclass(frozen=True)
class Concept:
    """A WordNet synset studied by the suite, with everything needed to build texts offline."""

    synset: str
    name: str
    pos: str
    lemmas: list[str]
    gloss: str
    examples: list[str]
    n_links: int
    related: dict[str, list[RelatedSynset]]
    negatives: list[NegativeConcept]

    @property
    def related_terms(self) -> list[str]:
        """Sorted unique lemmas of related synsets, minus the concept's own lemmas and antonyms."""
        own = {lemma.lower() for lemma in self.lemmas}
        terms = {
            lemma
            for relation, items in self.related.items()
            if relation not in TERM_EXCLUDED_RELATIONS
            for item in items
            for lemma in item.lemmas
            if lemma.lower() not in own
        }
        return sorted(terms)

    def related_synsets(self) -> list[str]:
        """Sorted unique ids of all related synsets, whatever the relation."""
        return sorted({item.synset for items in self.related.values() for item in items})


@dataclass(frozen=True)
class ConceptGraph:
    """A seeded, reproducible set of concepts plus the neutral pool shared by all of them."""

    wordnet_version: str
    selection_rule: str
    seed: int
    min_distance: int
    n_negatives: int
    negative_rule: str
    concepts: list[Concept]
    neutral_pool: list[NeutralItem] = field(default_factory=list)

    @property
    def metadata(self) -> dict[str, Any]:
        """The build parameters, for logging (e.g. as MLflow params)."""
        return {
            "wordnet_version": self.wordnet_version,
            "selection_rule": self.selection_rule,
            "seed": self.seed,
            "min_distance": self.min_distance,
            "n_negatives": self.n_negatives,
            "negative_rule": self.negative_rule,
            "n_concepts": len(self.concepts),
            "n_neutral": len(self.neutral_pool),
        }

    @property
    def synsets(self) -> list[str]:
        return [concept.synset for concept in self.concepts]

    def get(self, synset_id: str) -> Concept:
        """The concept with this synset id; ConceptError naming the known ids otherwise."""
        for concept in self.concepts:
            if concept.synset == synset_id:
                return concept
        raise ConceptError(
            f"concept {synset_id!r} is not in this graph; it holds: {', '.join(self.synsets)}"
        )

    def __len__(self) -> int:
        return len(self.concepts)

    def __iter__(self) -> Iterator[Concept]:
        return iter(self.concepts)

    def select(
        self, limit: int | None = None, synsets: Sequence[str] | None = None
    ) -> ConceptGraph:
        """A graph restricted to some concepts (in the given order); the neutral pool is kept.

        The pool was checked against every concept of the full graph, so it stays valid.
        """
        concepts = list(self.concepts)
        if synsets is not None:
            concepts = [self.get(s) for s in synsets]
        if limit is not None:
            if limit < 1:
                raise ConceptError(f"limit must be at least 1, got {limit}")
            concepts = concepts[:limit]
        return ConceptGraph(
            wordnet_version=self.wordnet_version,
            selection_rule=self.selection_rule,
            seed=self.seed,
            min_distance=self.min_distance,
            n_negatives=self.n_negatives,
            negative_rule=self.negative_rule,
            concepts=concepts,
            neutral_pool=list(self.neutral_pool),
        )

    # -- serialisation -----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "metadata": {
                "wordnet_version": self.wordnet_version,
                "selection_rule": self.selection_rule,
                "seed": self.seed,
                "min_distance": self.min_distance,
                "n_negatives": self.n_negatives,
                "negative_rule": self.negative_rule,
            },
            "concepts": [_concept_to_dict(c) for c in self.concepts],
            "neutral_pool": [
                {"synset": n.synset, "name": n.name, "gloss": n.gloss} for n in self.neutral_pool
            ],
        }

    def to_json(self) -> str:
        """Pretty, deterministic JSON: fixed key order, one line per leaf record, final newline.

        Leaf records (a related synset, a negative) stay on one line so that the committed
        file reads and diffs well; ``json.loads`` gives exactly ``to_dict()`` back.
        """
        return _pretty(self.to_dict()) + "\n"

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> ConceptGraph:
        return _graph_from_dict(data, source)

    @classmethod
    def from_json(cls, text: str, source: str = "<string>") -> ConceptGraph:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConceptError(f"{source}: not valid JSON ({exc})") from exc
        return _graph_from_dict(data, source)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> ConceptGraph:
        return load_concepts(path)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _is_leaf(value: Any) -> bool:
    """A scalar, a list of scalars, or a dict whose values are scalars or lists of scalars."""
    if _is_scalar(value):
        return True
    if isinstance(value, list):
        return all(_is_scalar(v) for v in value)
    if isinstance(value, dict):
        return all(
            _is_scalar(v) or (isinstance(v, list) and all(_is_scalar(x) for x in v))
            for v in value.values()
        )
    return False


def _pretty(value: Any, indent: int = 0, in_list: bool = False) -> str:
    """Indented JSON; scalar lists and leaf records inside lists are written on one line."""
    if _is_leaf(value) and (in_list or not isinstance(value, dict)):
        return json.dumps(value, ensure_ascii=False)
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [
            f"{inner}{json.dumps(k, ensure_ascii=False)}: {_pretty(v, indent + 2)}"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if not value:
        return "[]"
    items = [f"{inner}{_pretty(v, indent + 2, in_list=True)}" for v in value]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


def _concept_to_dict(concept: Concept) -> dict[str, Any]:
    return {
        "synset": concept.synset,
        "name": concept.name,
        "pos": concept.pos,
        "lemmas": list(concept.lemmas),
        "gloss": concept.gloss,
        "examples": list(concept.examples),
        "n_links": concept.n_links,
        "related": {
            relation: [
                {"synset": r.synset, "name": r.name, "lemmas": list(r.lemmas)} for r in items
            ]
            for relation, items in concept.related.items()
        },
        "negatives": [
            {
                "synset": n.synset,
                "name": n.name,
                "lemmas": list(n.lemmas),
                "gloss": n.gloss,
                "distance": n.distance,
            }
            for n in concept.negatives
        ],
    }


# -- validation on load -------------------------------------------------------


def _need(obj: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(obj, dict):
        raise ConceptError(f"{where}: expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise ConceptError(f"{where}: missing key {key!r}")
    value = obj[key]
    # bool is an int subclass; never accept it where a number is meant.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise ConceptError(f"{where}.{key}: expected {_kind_name(kind)}, got bool")
    if not isinstance(value, kind):
        got = type(value).__name__
        raise ConceptError(f"{where}.{key}: expected {_kind_name(kind)}, got {got}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _str_list(obj: dict, key: str, where: str) -> list[str]:
    values = _need(obj, key, list, where)
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise ConceptError(f"{where}.{key}[{i}]: expected str, got {type(value).__name__}")
    return list(values)


def _graph_from_dict(data: Any, source: str) -> ConceptGraph:
    if not isinstance(data, dict):
        raise ConceptError(f"{source}: expected a JSON object at the top level")
    if data.get("format") != FORMAT:
        raise ConceptError(
            f"{source}: not a concept graph (format is {data.get('format')!r}, "
            f"expected {FORMAT!r}); regenerate it with `steer-eval concepts`"
        )
    if data.get("format_version") != FORMAT_VERSION:
        raise ConceptError(
            f"{source}: format_version {data.get('format_version')!r} is not supported "
            f"(expected {FORMAT_VERSION}); regenerate it with `steer-eval concepts`"
        )
    meta = _need(data, "metadata", dict, source)
    where = f"{source}: metadata"
    concepts_raw = _need(data, "concepts", list, source)
    concepts: list[Concept] = []
    for i, raw in enumerate(concepts_raw):
        cwhere = f"{source}: concepts[{i}]"
        related_raw = _need(raw, "related", dict, cwhere)
        related: dict[str, list[RelatedSynset]] = {}
        for relation, items in related_raw.items():
            if relation not in ALL_RELATIONS:
                raise ConceptError(f"{cwhere}.related: unknown relation {relation!r}")
            if not isinstance(items, list):
                raise ConceptError(f"{cwhere}.related.{relation}: expected a list")
            related[relation] = [
                RelatedSynset(
                    synset=_need(item, "synset", str, f"{cwhere}.related.{relation}[{j}]"),
                    name=_need(item, "name", str, f"{cwhere}.related.{relation}[{j}]"),
                    lemmas=_str_list(item, "lemmas", f"{cwhere}.related.{relation}[{j}]"),
                )
                for j, item in enumerate(items)
            ]
        negatives = []
        for j, item in enumerate(_need(raw, "negatives", list, cwhere)):
            nwhere = f"{cwhere}.negatives[{j}]"
            negatives.append(
                NegativeConcept(
                    synset=_need(item, "synset", str, nwhere),
                    name=_need(item, "name", str, nwhere),
                    lemmas=_str_list(item, "lemmas", nwhere),
                    gloss=_need(item, "gloss", str, nwhere),
                    distance=_need(item, "distance", int, nwhere),
                )
            )
        concept = Concept(
            synset=_need(raw, "synset", str, cwhere),
            name=_need(raw, "name", str, cwhere),
            pos=_need(raw, "pos", str, cwhere),
            lemmas=_str_list(raw, "lemmas", cwhere),
            gloss=_need(raw, "gloss", str, cwhere),
            examples=_str_list(raw, "examples", cwhere),
            n_links=_need(raw, "n_links", int, cwhere),
            related=related,
            negatives=negatives,
        )
        if not concept.lemmas:
            raise ConceptError(f"{cwhere}: 'lemmas' is empty")
        concepts.append(concept)
    ids = [c.synset for c in concepts]
    duplicates = sorted({s for s in ids if ids.count(s) > 1})
    if duplicates:
        raise ConceptError(f"{source}: duplicate concepts {duplicates}")
    neutral = [
        NeutralItem(
            synset=_need(item, "synset", str, f"{source}: neutral_pool[{j}]"),
            name=_need(item, "name", str, f"{source}: neutral_pool[{j}]"),
            gloss=_need(item, "gloss", str, f"{source}: neutral_pool[{j}]"),
        )
        for j, item in enumerate(_need(data, "neutral_pool", list, source))
    ]
    return ConceptGraph(
        wordnet_version=_need(meta, "wordnet_version", str, where),
        selection_rule=_need(meta, "selection_rule", str, where),
        seed=_need(meta, "seed", int, where),
        min_distance=_need(meta, "min_distance", int, where),
        n_negatives=_need(meta, "n_negatives", int, where),
        negative_rule=_need(meta, "negative_rule", str, where),
        concepts=concepts,
        neutral_pool=neutral,
    )


def load_concepts(
    path: str | Path = DEFAULT_PATH,
    limit: int | None = None,
    synsets: Sequence[str] | None = None,
) -> ConceptGraph:
    """Load and validate a concept graph file; optionally keep some concepts only.

    Every problem is reported as a ConceptError naming the file, so a run fails before any
    model is loaded.
    """
    path = Path(path)
    if not path.exists():
        raise ConceptError(
            f"concept file {path} does not exist; build it with `steer-eval concepts` "
            f"(the committed default is {DEFAULT_PATH})"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConceptError(f"concept file {path} cannot be read: {exc}") from exc
    graph = ConceptGraph.from_json(text, source=str(path))
    if not graph.concepts:
        raise ConceptError(f"{path}: holds no concepts")
    if synsets is not None:
        missing = [s for s in synsets if s not in graph.synsets]
        if missing:
            raise ConceptError(
                f"{path}: no concept {', '.join(map(repr, missing))}; "
                f"the file holds {', '.join(graph.synsets)}"
            )
    return graph.select(limit=limit, synsets=synsets)


# ---------------------------------------------------------------------------
# Building from WordNet
# ---------------------------------------------------------------------------


def _wordnet():
    """NLTK's WordNet reader, made to find the cached copy first (steering.assets)."""
    from steering.assets import use_wordnet

    use_wordnet()
    from nltk.corpus import wordnet

    return wordnet


def _clean(name: str) -> str:
    return name.replace("_", " ")


def _synset(wn: Any, synset_id: str) -> Any:
    """The NLTK synset for an id such as 'dog.n.01', or a ConceptError that shows the format."""
    try:
        return wn.synset(synset_id)
    except Exception as exc:  # WordNetError or ValueError, depending on how the id is malformed
        hint = ""
        word = synset_id.split(".")[0] if synset_id else ""
        if word:
            try:
                candidates = sorted(s.name() for s in wn.synsets(word))[:5]
            except Exception:
                candidates = []
            if candidates:
                hint = f" (synsets for {word!r}: {', '.join(candidates)})"
        raise ConceptError(
            f"no WordNet synset {synset_id!r}; ids look like dog.n.01{hint}"
        ) from exc


def count_links(synset: Any, rule: str = "hatcat") -> int:
    """Number of relation links of a synset under a counting rule (see top_synsets)."""
    relations = _rule_relations(rule)
    return sum(len(getattr(synset, relation)()) for relation in relations)


def _rule_relations(rule: str) -> tuple[str, ...]:
    try:
        return COUNTING_RULES[rule]
    except KeyError:
        raise ConceptError(
            f"unknown counting rule {rule!r}; choose one of {sorted(COUNTING_RULES)}"
        ) from None


@lru_cache(maxsize=8)
def _ranking(pos: tuple[str, ...], rule: str, progress: bool) -> tuple[tuple[str, int], ...]:
    wn = _wordnet()
    relations = _rule_relations(rule)
    rows: list[tuple[str, int]] = []
    for p in pos:
        synsets = list(wn.all_synsets(p))
        for synset in _progress(synsets, f"counting links ({p})", progress):
            rows.append((synset.name(), sum(len(getattr(synset, r)()) for r in relations)))
    rows.sort(key=lambda row: (-row[1], row[0]))
    return tuple(rows)


def top_synsets(
    n: int, pos: Sequence[str] = ("n", "v"), rule: str = "hatcat", progress: bool = False
) -> list[str]:
    """The ``n`` synsets of the given parts of speech with the most relation links.

    Rule ``"hatcat"`` (default) reproduces the original research's list exactly. It counts, per
    synset, the targets of its synset-level (semantic) pointers: hypernyms + hyponyms + part,
    substance and member meronyms + part, substance and member holonyms + similar_tos +
    attributes + entailments + causes (the rule of the original code's ``count_relationships``).
    Instance hypernyms/hyponyms, domains, also-sees, verb groups and all word-level (lemma)
    pointers are NOT counted. Ties are broken by synset id: animal_order.n.01 and
    arthropod_genus.n.01 both have 256 links, and the id order keeps animal_order.n.01 10th,
    as in the original (whose stable sort followed WordNet's file order).
    For nouns and verbs the top 10 is person.n.01, change.v.01, bird_genus.n.01,
    mammal_genus.n.01, herb.n.01, asterid_dicot_genus.n.01, shrub.n.01, rosid_dicot_genus.n.01,
    fish_genus.n.01, animal_order.n.01. Rule ``"all"`` counts every synset-level pointer.

    Counting all nouns and verbs takes some seconds; the ranking is cached per process.
    """
    if n < 1:
        raise ConceptError(f"n must be at least 1, got {n}")
    ranking = _ranking(tuple(pos), rule, progress)
    return [synset_id for synset_id, _ in ranking[:n]]


def _related(wn: Any, synset: Any) -> dict[str, list[RelatedSynset]]:
    """Every relation of a synset, word-level pointers included, sorted and deduplicated."""
    own = synset.name()
    out: dict[str, list[RelatedSynset]] = {}
    for relation in ALL_RELATIONS:
        targets: dict[str, Any] = {}
        if relation in SYNSET_RELATIONS:
            for target in getattr(synset, relation)():
                targets[target.name()] = target
        for lemma in synset.lemmas():
            method = getattr(lemma, relation, None)
            if method is None:
                continue
            for target in method():
                target_synset = target.synset() if hasattr(target, "synset") else target
                targets[target_synset.name()] = target_synset
        targets.pop(own, None)
        if targets:
            out[relation] = [
                RelatedSynset(
                    synset=name,
                    name=_clean(targets[name].lemma_names()[0]),
                    lemmas=[_clean(x) for x in targets[name].lemma_names()],
                )
                for name in sorted(targets)
            ]
    return out


@lru_cache(maxsize=256)
def _word_pattern(words: frozenset[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w)))
    return re.compile(rf"(?<![\w-])(?:{alternatives})(?![\w-])")


def mentions(text: str, words: Iterable[str]) -> bool:
    """True when ``text`` contains any of ``words`` as a whole word (case-insensitive)."""
    lowered = frozenset(w.lower() for w in words if w)
    if not lowered:
        return False
    return _word_pattern(lowered).search(text.lower()) is not None


def concept_words(lemmas: Iterable[str]) -> set[str]:
    """Words whose presence marks a text as about a concept: its lemmas, plus the content words
    (4+ letters) of multi-word lemmas ("bird" and "genus" for bird genus), with plurals.
    """
    words: set[str] = set()
    for lemma in lemmas:
        lemma = _clean(lemma).lower()
        words.add(lemma)
        words.update(token for token in lemma.split() if len(token) >= 4)
    return words | {w + "s" for w in words} | {w + "es" for w in words}


def _mention_words(synset: Any) -> set[str]:
    return concept_words(synset.lemma_names())


def _sorted_ids(wn: Any, pos: str) -> list[str]:
    return sorted(s.name() for s in wn.all_synsets(pos))


_IDS_CACHE: dict[str, list[str]] = {}


def _candidate_ids(wn: Any, pos: str) -> list[str]:
    if pos not in _IDS_CACHE:
        _IDS_CACHE[pos] = _sorted_ids(wn, pos)
    return _IDS_CACHE[pos]


def _rng(seed: int, *parts: str) -> random.Random:
    """A seeded RNG per (seed, purpose): string seeds hash with SHA-512, not PYTHONHASHSEED."""
    return random.Random("|".join([str(seed), *parts]))


def path_distance(a: Any, b: Any) -> int | None:
    """WordNet shortest-path distance over hypernym links, as used for negatives.

    Nouns share the root entity.n.01. Verbs have hundreds of separate trees, so for two verbs
    NLTK's simulated root joins them (as NLTK's own verb similarities do); without it, a root verb
    such as change.v.01 only reaches its own descendants, i.e. kinds of change, and every
    "negative" would really be a positive. Different parts of speech give None.
    """
    simulate_root = a.pos() == "v" and b.pos() == "v"
    distance = a.shortest_path_distance(b, simulate_root=simulate_root)
    return None if distance is None else int(distance)


@dataclass(frozen=True)
class _Exclusion:
    """Synsets that are the concept or its topic, whatever their path distance.

    ``exact``: the concept, its ancestors, descendants and directly related synsets, and the
    member-linked synsets (member meronyms/holonyms) of the concept and its descendants.
    ``below``: the same minus the ancestors; anything under one of these is excluded too.

    Why: a descendant can sit at distance >= 5 (a cardiologist is 5+ hypernym links below
    person) and still be an instance of the concept. And the taxonomic concepts (bird genus,
    herb, ...) reach their species only through member links, which shortest_path_distance
    ignores: a junco is 10+ hypernym links from bird_genus.n.01, but it is the topic of genus
    Junco, a bird genus.
    """

    exact: frozenset[str]
    below: frozenset[str]

    def excludes(self, candidate: Any) -> bool:
        if candidate.name() in self.exact:
            return True
        ancestors = candidate.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
        return any(a.name() in self.below for a in ancestors)

    def __or__(self, other: _Exclusion) -> _Exclusion:
        return _Exclusion(self.exact | other.exact, self.below | other.below)


def _exclusion(synset: Any) -> _Exclusion:
    down = [synset, *synset.closure(lambda s: s.hyponyms() + s.instance_hyponyms())]
    up = synset.closure(lambda s: s.hypernyms() + s.instance_hypernyms())
    members = {m.name() for s in down for m in (*s.member_meronyms(), *s.member_holonyms())}
    below = {s.name() for s in down} | members
    exact = set(below) | {s.name() for s in up}
    for relation in SYNSET_RELATIONS:
        exact.update(s.name() for s in getattr(synset, relation)())
    return _Exclusion(frozenset(exact), frozenset(below))


class _CandidateDraw:
    """Distinct seeded random picks from ``ids``, skipping exact exclusions, until ``max_tries``
    indices have been drawn: the one sampling loop behind negatives and the neutral pool."""

    def __init__(
        self, wn: Any, ids: Sequence[str], rng: random.Random, exclusion: _Exclusion, max_tries: int
    ) -> None:
        self.wn, self.ids, self.rng, self.exclusion = wn, ids, rng, exclusion
        self.limit = min(max_tries, len(ids))
        self.tried: set[int] = set()

    def take(self, wanted: Callable[[], bool]) -> Iterator[Any]:
        """Yield candidate synsets while ``wanted()`` holds and tries remain."""
        while wanted() and len(self.tried) < self.limit:
            index = self.rng.randrange(len(self.ids))
            if index in self.tried:
                continue
            self.tried.add(index)
            if self.ids[index] in self.exclusion.exact:
                continue
            yield self.wn.synset(self.ids[index])


def _sample_negatives(
    wn: Any,
    synset: Any,
    n: int,
    min_distance: int,
    seed: int,
    max_tries: int,
) -> tuple[list[NegativeConcept], int]:
    """Random same-POS synsets at path_distance >= min_distance (None rejected).

    Also rejected: the concept's ancestors, descendants, directly related and member-linked
    synsets and anything below the latter (_Exclusion); so that a negative text never names
    the concept, candidates sharing a lemma with it or whose name or gloss mentions one of its
    _mention_words; and candidates whose first lemma repeats an already chosen negative's (two
    identical "What is X?" texts).
    """
    pos = synset.pos()
    ids = _candidate_ids(wn, "a" if pos == "s" else pos)
    rng = _rng(seed, "negatives", synset.name())
    own_lemmas = {_clean(x).lower() for x in synset.lemma_names()}
    avoid = _mention_words(synset)
    exclusion = _exclusion(synset)
    chosen: list[NegativeConcept] = []
    names: set[str] = set()
    draw = _CandidateDraw(wn, ids, rng, exclusion, max_tries)
    for candidate in draw.take(lambda: len(chosen) < n):
        if candidate.pos() != pos:
            continue
        lemmas = [_clean(x) for x in candidate.lemma_names()]
        name = lemmas[0]
        if name.lower() in names or own_lemmas & {x.lower() for x in lemmas}:
            continue
        if mentions(f"{name} {candidate.definition()}", avoid):
            continue
        distance = path_distance(synset, candidate)
        if distance is None or distance < min_distance or exclusion.excludes(candidate):
            continue
        names.add(name.lower())
        chosen.append(
            NegativeConcept(
                synset=candidate.name(),
                name=name,
                lemmas=lemmas,
                gloss=candidate.definition(),
                distance=distance,
            )
        )
    return chosen, len(draw.tried)


def _sample_neutral(
    wn: Any,
    concepts: Sequence[Any],
    n: int,
    min_distance: int,
    seed: int,
    max_tries: int,
) -> list[NeutralItem]:
    """Nouns far from every concept: distance >= min_distance, or None (another POS).

    Nouns only, so that neutral sentence templates stay grammatical. Items in a concept's
    topic (see _Exclusion) or that mention any concept's _mention_words are skipped.
    """
    ids = _candidate_ids(wn, "n")
    rng = _rng(seed, "neutral", *[c.name() for c in concepts])
    all_lemmas = {_clean(x).lower() for c in concepts for x in c.lemma_names()}
    avoid = set().union(*(_mention_words(c) for c in concepts)) if concepts else set()
    exclusion = _Exclusion(frozenset(), frozenset())
    for concept in concepts:
        exclusion = exclusion | _exclusion(concept)
    chosen: list[NeutralItem] = []
    names: set[str] = set()
    draw = _CandidateDraw(wn, ids, rng, exclusion, max_tries)
    for candidate in draw.take(lambda: len(chosen) < n):
        name = _clean(candidate.lemma_names()[0])
        lemmas = {_clean(x).lower() for x in candidate.lemma_names()}
        if name.lower() in names or lemmas & all_lemmas:
            continue
        if mentions(f"{name} {candidate.definition()}", avoid):
            continue
        distances = [path_distance(concept, candidate) for concept in concepts]
        if any(d is not None and d < min_distance for d in distances):
            continue
        if exclusion.excludes(candidate):
            continue
        names.add(name.lower())
        chosen.append(NeutralItem(synset=candidate.name(), name=name, gloss=candidate.definition()))
    if len(chosen) < n:
        raise ConceptError(
            f"found only {len(chosen)} of {n} neutral synsets at distance >= {min_distance} "
            f"from every concept after {len(draw.tried)} candidates; "
            "lower n_neutral or min_distance"
        )
    return chosen


def _progress(items: Sequence[Any], description: str, enabled: bool) -> Iterable[Any]:
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=description, file=sys.stderr, leave=False)


def build_concept(
    synset_id: str,
    seed: int = 0,
    n_negatives: int = 40,
    min_distance: int = 5,
    rule: str = "hatcat",
    max_tries: int | None = None,
) -> Concept:
    """One concept from WordNet, with its seeded negatives (see build_concept_graph)."""
    wn = _wordnet()
    synset = _synset(wn, synset_id)
    if max_tries is None:
        max_tries = max(20000, 200 * n_negatives)
    negatives, tries = _sample_negatives(wn, synset, n_negatives, min_distance, seed, max_tries)
    if len(negatives) < n_negatives:
        raise ConceptError(
            f"{synset.name()}: found only {len(negatives)} of {n_negatives} negatives of the same "
            f"part of speech at path_distance >= {min_distance} after {tries} random "
            "candidates; lower min_distance or n_negatives"
        )
    lemmas = [_clean(x) for x in synset.lemma_names()]
    return Concept(
        synset=synset.name(),
        name=lemmas[0],
        pos=synset.pos(),
        lemmas=lemmas,
        gloss=synset.definition(),
        examples=list(synset.examples()),
        n_links=count_links(synset, rule),
        related=_related(wn, synset),
        negatives=negatives,
    )


def build_concept_graph(
    synsets: Sequence[str] | None = None,
    top_n: int = 10,
    seed: int = 0,
    n_negatives: int = 40,
    min_distance: int = 5,
    n_neutral: int = 60,
    progress: bool = True,
    rule: str = "hatcat",
    max_tries: int | None = None,
) -> ConceptGraph:
    """Build a concept graph from WordNet: explicit synsets, or the ``top_n`` by link count.

    ``n_negatives`` defaults to 40 so that probe training (10), probe evaluation (20, disjoint)
    and the negative centroid (10) each get their own negatives (experiments.prompts).
    Negatives and the neutral pool are drawn with RNGs seeded from ``seed`` and the synset ids,
    so a concept's negatives do not depend on which other concepts are in the graph.
    ``max_tries`` caps the random candidates examined per concept (default 20,000, which covers
    all verbs) before a ConceptError says there are too few.
    """
    if n_negatives < 1 or n_neutral < 0 or min_distance < 1:
        raise ConceptError(
            "n_negatives and min_distance must be at least 1 and n_neutral at least 0 "
            f"(got {n_negatives}, {min_distance}, {n_neutral})"
        )
    wn = _wordnet()
    if synsets is None:
        ids = top_synsets(top_n, rule=rule, progress=progress)
        selection = (
            f"top {top_n} noun/verb synsets by link count ({rule}: {RULE_DESCRIPTIONS[rule]})"
        )
    else:
        resolved = [_synset(wn, s).name() for s in synsets]
        if len(set(resolved)) != len(resolved):
            raise ConceptError(f"duplicate synsets in {list(synsets)}")
        if not resolved:
            raise ConceptError("no synsets given")
        ids = resolved
        selection = "explicit list"
    concepts = [
        build_concept(
            s,
            seed=seed,
            n_negatives=n_negatives,
            min_distance=min_distance,
            rule=rule,
            max_tries=max_tries,
        )
        for s in _progress(ids, "sampling negatives", progress)
    ]
    neutral = _sample_neutral(
        wn,
        [wn.synset(s) for s in ids],
        n_neutral,
        min_distance,
        seed,
        max_tries=max_tries or max(20000, 200 * n_neutral),
    )
    return ConceptGraph(
        wordnet_version=str(wn.get_version()),
        selection_rule=selection,
        seed=seed,
        min_distance=min_distance,
        n_negatives=n_negatives,
        negative_rule=NEGATIVE_RULE,
        concepts=concepts,
        neutral_pool=neutral,
    )
