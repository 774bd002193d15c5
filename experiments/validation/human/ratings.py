"""Reading a rated CSV back: ratings, sample ids, and whether a topic guess was right.

A rated file comes back from a spreadsheet or the terminal rater; spreadsheets drop
leading zeros, write ``7`` as ``7.0`` and swallow the ``'`` prefix, so those are
accepted. Everything else that is wrong is collected per row, so the person fixing the
file sees every problem at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.rundir import restore
from experiments.validation.human.answer_key import key_samples
from experiments.validation.human.csvio import (
    RATING_COLUMNS,
    canonical_text,
    read_csv,
    text_digest,
)

RATING_MIN, RATING_MAX = 0, 10
# Rank words shared by many concepts ("bird genus", "fish genus"): alone they do not
# identify a concept, so a topic guess of just "genus" is not counted as correct.
GENERIC_CONCEPT_WORDS = frozenset(
    {"genus", "genera", "order", "orders", "family", "class", "species", "kind", "type"}
)


# --------------------------------------------------------------------------- one cell


# Digits only, as a spreadsheet writes a number (7, 07, 7.0): Python's int() also takes
# "+7", "\t7" and "7_0", which no rater typed as a rating.
_RATING_RE = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_rating(raw: str) -> tuple[int | None, str | None]:
    """(rating, None), (None, None) when blank, or (None, reason) when invalid."""
    value = restore(raw).strip(" ")
    if not value.strip():
        return None, None
    if not _RATING_RE.fullmatch(value):
        return None, f"rating {raw!r} is not a number (expected an integer 0-10, digits only)"
    as_float = float(value)
    if not (math.isfinite(as_float) and as_float.is_integer()):
        return None, f"rating {raw!r} is not a whole number (expected an integer 0-10)"
    number = int(as_float)
    if not RATING_MIN <= number <= RATING_MAX:
        return None, f"rating {raw!r} is out of range (expected an integer 0-10)"
    return number, None


def normalise_sample_id(raw: str, known: dict[str, dict[str, Any]]) -> str:
    """Spreadsheets drop leading zeros ("007" -> "7"); map those back to the key's id."""
    value = restore(raw).strip()
    if value in known:
        return value
    if value.isdigit():
        for sid in known:
            if sid.isdigit() and int(sid) == int(value):
                return sid
    return value


# --------------------------------------------------------------------------- a whole file


@dataclass
class RatedSample:
    sample_id: str
    rating: int | None
    guess: str
    text: str


@dataclass
class ParsedRatings:
    rows: dict[str, RatedSample]
    problems: list[str]  # any problem makes the file unusable
    warnings: list[str]  # shown, but the file is usable


def parse_ratings(path: Path, key: dict[str, Any]) -> ParsedRatings:
    """Validate a ratings CSV against the answer key; collect every problem by row."""
    header, rows = read_csv(path)
    known = key_samples(key)
    problems: list[str] = []
    warnings: list[str] = []
    extra = [h for h in header if h not in RATING_COLUMNS]
    if extra:
        warnings.append(f"ignoring extra column(s) {extra}")
    seen: dict[str, int] = {}
    parsed: dict[str, RatedSample] = {}
    for row in rows:
        where = row.where()
        raw_id = row.cells["sample_id"]
        sid = normalise_sample_id(raw_id, known)
        if not sid:
            problems.append(f"{where}: empty sample_id")
            continue
        if sid not in known:
            problems.append(
                f"{where}: unknown sample_id {raw_id.strip()!r} (not in the answer key)"
            )
            continue
        if sid in seen:
            problems.append(f"{where}: duplicate sample_id {sid!r} (first seen in row {seen[sid]})")
            continue
        seen[sid] = row.number
        text = row.cells["generated_text"]
        if text_digest(text) != known[sid]["text_sha256"]:
            problems.append(
                f"{where}: generated_text differs from the exported text for sample {sid} "
                "(edited, or a CSV from another export/run)"
            )
        rating, reason = parse_rating(row.cells["human_rating"])
        if reason:
            problems.append(f"{where}: {reason}")
        guess = canonical_text(row.cells.get("topic_guess", ""))
        parsed[sid] = RatedSample(sid, rating, guess, canonical_text(text))
    absent = [sid for sid in known if sid not in seen]
    if absent:
        warnings.append(
            f"{len(absent)} sample(s) missing from the file, treated as unrated: "
            + ", ".join(absent[:10])
            + (" …" if len(absent) > 10 else "")
        )
    return ParsedRatings(parsed, problems, warnings)


# --------------------------------------------------------------------------- topic guesses


def stem(word: str) -> str:
    """Strip a plural ending (birds -> bird, bushes -> bush, berries -> berry)."""
    for suffix in ("ies", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def concept_match_words(name: str, lemmas: Iterable[str]) -> set[str]:
    """Stemmed words that identify a concept: whole names/lemmas (as phrases) and their
    content words of 4+ letters, minus rank words shared by many concepts (genus, order)."""
    words: set[str] = set()
    for phrase in [name, *lemmas]:
        tokens = re.findall(r"[a-z]+", phrase.replace("_", " ").lower())
        if not tokens:
            continue
        words.add(" ".join(stem(t) for t in tokens))
        words.update(stem(t) for t in tokens if len(t) >= 4 and t not in GENERIC_CONCEPT_WORDS)
    return words - {stem(w) for w in GENERIC_CONCEPT_WORDS}


def guess_is_correct(guess: str, name: str, lemmas: Iterable[str]) -> bool:
    """A guess is correct when it word-matches the concept: one of its words (or word
    sequences), after lower-casing and plural stripping, equals the concept's name, a
    lemma, or a content word of either. "birds" matches bird genus; "genus" alone does not.
    """
    tokens = [stem(t) for t in re.findall(r"[a-z]+", guess.lower())]
    if not tokens:
        return False
    targets = concept_match_words(name, lemmas)
    grams = {" ".join(tokens[i : i + k]) for k in (1, 2, 3) for i in range(len(tokens) - k + 1)}
    return bool(grams & targets)
