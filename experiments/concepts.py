"""The WordNet concept graph: the studied concepts, their relations, negatives and a neutral pool.

This module is the graph's data model and its validated file forms: the graph JSON that
``steer-eval concepts`` writes (building it from WordNet lives in
``experiments/wordnet.py``) and your own list of concepts outside WordNet, as JSON or CSV
(:func:`own_concepts`, docs/own-concepts.md). Both are validated by pydantic (the graph
into the data classes below, an own list's rows by :class:`OwnConcept`), with errors that
name the file, the row and the field. It is longer than 500 lines because it holds both
file forms with the relation tables they share and the own list's negatives rule.

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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    StrictInt,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

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
    distance: StrictInt  # strict: the file's JSON int, never a bool or a string


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
    n_links: StrictInt
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
            **{f.name: getattr(self, f.name) for f in fields(_Metadata)},
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
        concepts = list(self.concepts) if synsets is None else [self.get(s) for s in synsets]
        if limit is not None:
            if limit < 1:
                raise ConceptError(f"limit must be at least 1, got {limit}")
            concepts = concepts[:limit]
        return replace(self, concepts=concepts, neutral_pool=list(self.neutral_pool))

    # -- serialisation -----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "metadata": {f.name: getattr(self, f.name) for f in fields(_Metadata)},
            "concepts": [asdict(c) for c in self.concepts],
            "neutral_pool": [asdict(n) for n in self.neutral_pool],
        }

    def to_json(self) -> str:
        """Pretty, deterministic JSON: fixed key order, one line per leaf record, final newline.

        Leaf records (a related synset, a negative) stay on one line so that the committed
        file reads and diffs well; ``json.loads`` gives exactly ``to_dict()`` back.
        """
        return _pretty(self.to_dict()) + "\n"

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


# -- validation on load -------------------------------------------------------


@dataclass
class _Metadata:
    wordnet_version: str
    selection_rule: str
    seed: StrictInt
    min_distance: StrictInt
    n_negatives: StrictInt
    negative_rule: str


@dataclass
class _GraphFile:
    """The graph JSON's body, validated by pydantic into the data classes above (strings
    are strings, ints are ints, no field missing; keys beyond the fields are ignored)."""

    metadata: _Metadata
    concepts: list[Concept]
    neutral_pool: list[NeutralItem]


@lru_cache(maxsize=1)
def _graph_file() -> TypeAdapter[_GraphFile]:
    return TypeAdapter(_GraphFile)


_KINDS = {"int_type": "int", "string_type": "str", "list_type": "list", "dict_type": "dict"}


def _graph_error(source: str, exc: ValidationError) -> ConceptError:
    """The first problem, named by its path in the file (``concepts[2].negatives[0]``)."""
    errors = exc.errors(include_url=False)
    loc, kind, value = errors[0]["loc"], errors[0]["type"], errors[0]["input"]
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc]
    path = "".join(parts).lstrip(".")
    if kind == "missing":
        parent = "".join(parts[:-1]).lstrip(".")
        text = f"{parent + ': ' if parent else ''}missing key {loc[-1]!r}"
    elif kind == "dataclass_type" or kind in _KINDS:
        text = f"{path}: expected {_KINDS.get(kind, 'an object')}, got {type(value).__name__}"
    else:
        text = f"{path}: {errors[0]['msg']}"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ConceptError(f"{source}: {text}{more}")


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
    try:
        body = _graph_file().validate_python(data)
    except ValidationError as exc:
        raise _graph_error(source, exc) from None
    for i, concept in enumerate(body.concepts):
        unknown = sorted(set(concept.related) - set(ALL_RELATIONS))
        if unknown:
            raise ConceptError(f"{source}: concepts[{i}].related: unknown relation {unknown[0]!r}")
        if not concept.lemmas:
            raise ConceptError(f"{source}: concepts[{i}]: 'lemmas' is empty")
    ids = [c.synset for c in body.concepts]
    duplicates = sorted({s for s in ids if ids.count(s) > 1})
    if duplicates:
        raise ConceptError(f"{source}: duplicate concepts {duplicates}")
    return ConceptGraph(
        **vars(body.metadata), concepts=body.concepts, neutral_pool=body.neutral_pool
    )


def load_concepts(
    path: str | Path = DEFAULT_PATH,
    limit: int | None = None,
    synsets: Sequence[str] | None = None,
) -> ConceptGraph:
    """Load and validate a concept file; optionally keep some concepts only.

    The file is a concept graph (``steer-eval concepts``), or your own list of concepts
    as JSON or CSV (:func:`own_concepts`). Every problem is reported as a ConceptError
    naming the file (and the row and field of an own list), so a run fails before any
    model is loaded.
    """
    path = Path(path)
    if not path.exists():
        raise ConceptError(
            f"concept file {path} does not exist; build it with `steer-eval concepts` "
            f"or write your own list (docs/own-concepts.md; the committed default is "
            f"{DEFAULT_PATH})"
        )
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConceptError(f"concept file {path} cannot be read: {exc}") from exc
    if path.suffix.lower() == ".csv":
        graph = own_concepts(_csv_rows(text, str(path)), text, str(path), csv_rows=True)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConceptError(f"{path}: not valid JSON ({exc})") from exc
        if isinstance(data, list) or (isinstance(data, dict) and "format" not in data):
            rows = data.get("concepts") if isinstance(data, dict) else data
            if not isinstance(rows, list):
                raise ConceptError(
                    f"{path}: not a concept graph (no 'format') nor a list of concepts (a "
                    "JSON list, or an object with a 'concepts' list); see docs/own-concepts.md"
                )
            graph = own_concepts(rows, text, str(path))
        else:
            graph = _graph_from_dict(data, str(path))
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
# Your own concepts: a plain list, outside WordNet
# ---------------------------------------------------------------------------

# Which WordNet relation each own field fills, so the boundary texts use its phrasing:
# broader -> "X is a type of T", narrower -> "T is a type of X", related -> WordNet's
# "see also" pointer, phrased "X is related to T" (it has no phrasing of its own).
OWN_RELATIONS = {"broader": "hypernyms", "narrower": "hyponyms", "related": "also_sees"}
OWN_NEGATIVES = 40
OWN_SEED = 0
OWN_NEGATIVE_RULE = (
    "own list: per concept, the file's other concepts that neither relate to it nor "
    "mention each other, plus the WordNet negatives of the shipped top-10 graph that do "
    "not mention it (seeded shuffle, 40 in all); neutral pool: the shipped top-10 graph's "
    "neutral pool minus items that mention any concept of the file"
)
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_LIST_SEPARATOR = ";"


def _csv_rows(text: str, source: str) -> list[dict[str, str]]:
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise ConceptError(f"{source}: empty CSV; the first line names the columns")
    rows = []
    for row in reader:
        if None in row:  # more cells than columns
            raise ConceptError(
                f"{source}: line {reader.line_num}: more cells than the header's "
                f"{len(reader.fieldnames)} columns (quote a cell that holds a comma)"
            )
        rows.append(row)
    return rows


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# Fields of one concept in an own list (``OwnConcept``); a CSV's list cells hold their
# items separated by semicolons. ``gloss`` is accepted for ``definition``.
OWN_ALIASES = {"gloss": "definition"}


def _bad(message: str) -> PydanticCustomError:
    """A validation error whose text is ``message`` as written (it names its field)."""
    return PydanticCustomError("own_concept", "{message}", {"message": message})


class OwnConcept(BaseModel):
    """One concept of an own list (docs/own-concepts.md). Text is whitespace-normalised;
    blank cells and items count as absent; every error names its field."""

    model_config = ConfigDict(extra="forbid")

    name: str
    definition: str
    related: list[str]  # at least one
    lemmas: list[str] = []  # the name comes first
    broader: list[str] = []
    narrower: list[str] = []
    examples: list[str] = []
    id: str = ""  # default: the name in lower case, '_' for other characters
    pos: str = "n"

    @field_validator("name", "definition", "id", "pos", mode="before")
    @classmethod
    def _text(cls, value: Any, info: ValidationInfo) -> str:
        key = info.field_name
        if value is not None and not isinstance(value, str):
            raise _bad(f"'{key}' must be a string, got {type(value).__name__}")
        text = " ".join((value or "").split())
        if not text and key in ("name", "definition"):
            raise _bad(f"'{key}' is missing or empty")
        return text

    @field_validator("related", "lemmas", "broader", "narrower", "examples", mode="before")
    @classmethod
    def _items(cls, value: Any, info: ValidationInfo) -> list[str]:
        key = info.field_name
        if value is None or (isinstance(value, str) and not value.strip()):
            value = []
        elif isinstance(value, str) and (info.context or {}).get("csv"):
            value = value.split(_LIST_SEPARATOR)
        if not isinstance(value, list):
            raise _bad(f"'{key}' must be a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise _bad(f"'{key}' item {i + 1} must be a string, got {type(item).__name__}")
        items = [" ".join(item.split()) for item in value if item.strip()]
        if not items and key == "related":
            raise _bad(f"'{key}' is missing or empty")
        return items

    @model_validator(mode="after")
    def _concept(self) -> OwnConcept:
        self.id, self.pos = self.id or _slug(self.name), self.pos or "n"
        if not _ID_RE.match(self.id):
            raise _bad(
                f"'id' {self.id!r} must be letters, digits, '_', '.' or '-' (it names the "
                "concept's probe file)"
            )
        if self.pos not in ("n", "v"):
            raise _bad(f"'pos' must be n (noun) or v (verb), got {self.pos!r}")
        lowered = " ".join([self.definition, *self.examples]).lower()
        for fragment in ("tell me about", "here is a story"):
            if fragment in lowered:
                raise _bad(
                    f"'definition' or 'examples' contains the generation prompt {fragment!r}; "
                    "centroid texts must not echo a prompt"
                )
        own = {w.lower() for w in [self.name, *self.lemmas]}
        for key in OWN_RELATIONS:
            if same := [t for t in getattr(self, key) if t.lower() in own]:
                raise _bad(
                    f"'{key}' names the concept itself ({', '.join(same)}); list other terms"
                )
        self.lemmas = [self.name, *[x for x in self.lemmas if x.lower() != self.name.lower()]]
        return self

    def terms(self) -> set[str]:
        """Its related, broader and narrower terms, lower-cased."""
        return {t.lower() for key in OWN_RELATIONS for t in getattr(self, key)}


def _own_row(raw: Any, index: int, source: str, csv_rows: bool) -> OwnConcept:
    """One validated row of an own list; errors name the row (a CSV's line) and field."""
    where = f"{source}: line {index + 2}" if csv_rows else f"{source}: concepts[{index}]"
    if not isinstance(raw, dict):
        raise ConceptError(f"{where}: expected an object with name, definition, related")
    raw = {OWN_ALIASES.get(k, k): v for k, v in raw.items()}
    if isinstance(raw.get("name"), str) and raw["name"].strip():
        where += f" ({raw['name'].strip()!r})"
    try:
        return OwnConcept.model_validate(raw, context={"csv": csv_rows})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        raise ConceptError(
            f"{where}: unknown field {', '.join(map(repr, sorted(unknown)))}; the fields are "
            f"{', '.join(OwnConcept.model_fields)} (gloss = definition)"
        ) from None
    messages = [
        f"'{e['loc'][0]}' is missing or empty" if e["type"] == "missing" else e["msg"]
        for e in errors
    ]
    raise ConceptError(f"{where}: {'; '.join(messages)}") from None


@lru_cache(maxsize=1)
def _shipped_pools() -> tuple[tuple[NeutralItem, ...], tuple[NegativeConcept, ...]]:
    """The committed top-10 graph's neutral pool and the union of its WordNet negatives
    (sorted by synset, none of them in the neutral pool)."""
    shipped = ConceptGraph.from_json(DEFAULT_PATH.read_text(encoding="utf-8"), str(DEFAULT_PATH))
    neutral_ids = {n.synset for n in shipped.neutral_pool}
    negatives = {
        n.synset: n for c in shipped.concepts for n in c.negatives if n.synset not in neutral_ids
    }
    return tuple(shipped.neutral_pool), tuple(negatives[k] for k in sorted(negatives))


def _own_negatives(
    row: OwnConcept, rows: list[OwnConcept], pool: Sequence[NegativeConcept]
) -> list[NegativeConcept]:
    """The concept's negatives: the file's unrelated concepts and the shipped negatives
    that do not mention it, in a seeded order (their position decides the split)."""
    words = concept_words(row.lemmas)
    candidates: list[NegativeConcept] = []
    for other in rows:
        if other is row:
            continue
        if {w.lower() for w in other.lemmas} & row.terms() or {
            w.lower() for w in row.lemmas
        } & other.terms():
            continue
        if mentions(f"{other.name} {other.definition}", words) or mentions(
            f"{row.name} {row.definition}", concept_words(other.lemmas)
        ):
            continue
        candidates.append(NegativeConcept(other.id, other.name, other.lemmas, other.definition, -1))
    candidates += [n for n in pool if not mentions(f"{n.name} {n.gloss}", words)]
    seeded_random(OWN_SEED, "own-negatives", row.id).shuffle(candidates)
    return candidates[:OWN_NEGATIVES]


def own_concepts(rows: list[Any], text: str, source: str, csv_rows: bool = False) -> ConceptGraph:
    """A concept graph from your own list of concepts (JSON objects or CSV rows).

    Each concept brings its definitional texts (``name``, ``definition``, ``lemmas``,
    ``examples``) and its relational ones (``related``, and optionally ``broader`` and
    ``narrower`` terms); negatives and the neutral pool are chosen as
    :data:`OWN_NEGATIVE_RULE` says. The graph's metadata carries a hash of the file, so
    its classifiers get their own folder and an edit retrains them.
    """
    import hashlib

    if not rows:
        raise ConceptError(f"{source}: holds no concepts")
    parsed = [_own_row(raw, i, source, csv_rows) for i, raw in enumerate(rows)]
    ids = [r.id for r in parsed]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ConceptError(
            f"{source}: two concepts share the id {', '.join(map(repr, duplicates))}; give "
            "them different names or an 'id'"
        )
    neutral, pool = _shipped_pools()
    every_word = set().union(*(concept_words(r.lemmas) for r in parsed))
    neutral_pool = [n for n in neutral if not mentions(f"{n.name} {n.gloss}", every_word)]
    concepts = []
    for row in parsed:
        related = {
            relation: [RelatedSynset(f"term:{t}", t, [t]) for t in getattr(row, key)]
            for key, relation in OWN_RELATIONS.items()
            if getattr(row, key)
        }
        concepts.append(
            Concept(
                synset=row.id,
                name=row.name,
                pos=row.pos,
                lemmas=row.lemmas,
                gloss=row.definition,
                examples=row.examples,
                n_links=sum(len(v) for v in related.values()),
                related=related,
                negatives=_own_negatives(row, parsed, pool),
            )
        )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return ConceptGraph(
        wordnet_version="none (own concepts)",
        selection_rule=f"own concept list {Path(source).name} (sha256 {digest})",
        seed=OWN_SEED,
        min_distance=0,
        n_negatives=OWN_NEGATIVES,
        negative_rule=OWN_NEGATIVE_RULE,
        concepts=concepts,
        neutral_pool=neutral_pool,
    )


# ---------------------------------------------------------------------------
# Text helpers: does a text mention a concept?
# ---------------------------------------------------------------------------


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
        lemma = clean_lemma(lemma).lower()
        words.add(lemma)
        words.update(token for token in lemma.split() if len(token) >= 4)
    return words | {w + "s" for w in words} | {w + "es" for w in words}


def clean_lemma(name: str) -> str:
    return name.replace("_", " ")


def seeded_random(seed: int, *parts: str) -> random.Random:
    """A seeded RNG per (seed, purpose): string seeds hash with SHA-512, not PYTHONHASHSEED."""
    return random.Random("|".join([str(seed), *parts]))
