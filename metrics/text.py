"""Surface text measures: concept term counts and coherence checks.

Term counts compare the embedding metric with the seed's older term-counting measure.
Coherence checks exist because the original research's strong steering collapsed into
empty text, loops and prompt echoes that a similarity score alone does not reveal.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

_WORD = re.compile(r"\w+(?:'\w+)*")
ECHO_THRESHOLD = 0.5
LOOP_THRESHOLD = 0.5


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscores; inner apostrophes kept)."""
    return _WORD.findall(text.lower())


@functools.lru_cache(maxsize=1 << 16)
def term_pattern(term: str) -> re.Pattern[str]:
    """A case-insensitive, word-bounded pattern for one term.

    The term is regex-escaped; words of a multi-word term may be separated by any run of
    whitespace. "Word-bounded" means no word character directly before or after, so
    "bird" does not match "birdhouse" but does match "bird-watching".

    Cached: a concept's related terms run to hundreds, more than ``re``'s own cache of
    512 patterns holds, and recompiling them for every text was most of the default
    run's scoring time (about 7 of 9 s).
    """
    parts = [re.escape(part) for part in term.split()]
    if not parts:
        raise ValueError("A term must contain at least one non-space character.")
    return re.compile(r"(?<!\w)" + r"\s+".join(parts) + r"(?!\w)", re.IGNORECASE)


def term_hits(text: str, terms: Iterable[str]) -> dict[str, int]:
    """Occurrences of each term, counted independently of the other terms.

    Overlapping terms each count: in "a causal agent", both "causal agent" and "agent"
    score 1. Occurrences of one term are non-overlapping (regex scanning order).
    """
    return {term: len(term_pattern(term).findall(text)) for term in terms}


def count_terms(text: str, terms: Iterable[str]) -> int:
    """Total occurrences of the terms; a term listed twice (ignoring case) counts once."""
    unique = {" ".join(term.split()).casefold(): term for term in terms}
    return sum(term_hits(text, unique.values()).values())


def ngrams(tokens: Sequence[str], n: int) -> list[tuple[str, ...]]:
    """Contiguous word n-grams."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def is_near_empty(text: str, min_words: int = 3) -> bool:
    """True when the text has fewer than min_words word tokens (collapse to nothing)."""
    return len(words(text)) < min_words


def repeated_ngram_fraction(text: str, n: int = 3) -> float:
    """Fraction of word n-grams that repeat an earlier one (0 = no loops, near 1 = a loop).

    A text with fewer than n words has no n-grams and scores 0.0 (no repetition seen);
    is_near_empty is the check that flags such texts.
    """
    grams = ngrams(words(text), n)
    return (len(grams) - len(set(grams))) / len(grams) if grams else 0.0


def distinct_n(text: str, n: int = 2) -> float:
    """Unique word n-grams / total word n-grams; 0.0 when the text has no n-grams."""
    grams = ngrams(words(text), n)
    return len(set(grams)) / len(grams) if grams else 0.0


REPETITION_N = 10  # characters in the n-grams of :func:`repetition`


def repetition(text: str, n: int = REPETITION_N) -> float:
    """How many times over a text says what it says: its length in characters over the
    characters that no repeated character n-gram covers. 1 means nothing repeats; a
    phrase said k times in a row scores about k; there is no upper bound.

    Characters, not words: a loop need not be made of words ("hehehe…jobjobjob…" is
    two "words" to :func:`words`, so :func:`distinct_n` and
    :func:`repeated_ngram_fraction` see no repetition in it), and a script written
    without spaces (a repeated Thai "มุม") is cut into words where a mark happens to
    fall. A character is covered when an n-gram holding it occurred
    earlier in the text. ``n`` = 10 characters is longer than the short strings that
    ordinary prose repeats ("of the ", "ing ", "tion "), so English scores near 1, while
    a loop of any period is covered whole after its first period once it runs past
    n characters. Unbounded (unlike a share of repeated n-grams), it can be read as a
    multiple of the unsteered texts' own, as the gate reads perplexity.

    Appending another copy never lowers the score (``repetition(t * (k + 1)) >=
    repetition(t * k)``): the copy is covered whole and what was covered stays covered.
    A text shorter than ``n`` scores 1.0 (:func:`is_near_empty` flags empty ones).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    if len(text) < n:
        return 1.0
    seen: set[str] = set()
    covered = reach = 0  # characters covered so far; the end of the covered stretch
    for start in range(len(text) - n + 1):
        gram = text[start : start + n]
        if gram in seen:
            covered += start + n - max(start, reach)
            reach = start + n
        else:
            seen.add(gram)
    return len(text) / (len(text) - covered)


def _separates(char: str) -> bool:
    """Whitespace and punctuation (Unicode P*) end a token of :func:`alphabetic_share`."""
    return char.isspace() or unicodedata.category(char)[0] == "P"


def _alphabetic(token: str) -> bool:
    """A token of letters (L*) in any script, with the marks (M*) and format characters
    (Cf: zero-width joiners) that scripts such as Devanagari or Thai write letters with;
    a digit, a symbol (S*: ``< > = + $``, emoji) or anything else makes it no word."""
    kinds = [unicodedata.category(c) for c in token]
    return any(k[0] == "L" for k in kinds) and all(k[0] in "LM" or k == "Cf" for k in kinds)


# A markup tag (<b>, </em>, <a href="...">): one token, never a word, wherever it stands.
_TAG = re.compile(r"</?[^\W\d_][^<>]*>")


def alphabetic_tokens(text: str) -> tuple[int, int]:
    """(alphabetic tokens, tokens) of :func:`alphabetic_share`: each markup tag one
    token that is no word, the rest cut at whitespace and punctuation."""
    runs = itertools.groupby(_TAG.sub(" ", text), key=_separates)
    tokens = ["".join(run) for separates, run in runs if not separates]
    return sum(map(_alphabetic, tokens)), len(tokens) + len(_TAG.findall(text))


def alphabetic_share(text: str) -> float:
    """The share of a text's word tokens that are words of a language: of the runs of
    characters between whitespace and punctuation, those made of letters (any script:
    "Vögel", "птицы", "हिंदी", "我是学生" count; the marks a script writes letters with
    and zero-width joiners are part of a word), against those holding a digit or a
    symbol ("Nutt65れい35", "CFA666", "11111181141", "=", an emoji) and markup tags
    ("<strong>", "</em>": each one token, so "<em>Mammal</em>" is one word in three).
    A text without tokens (empty, whitespace, punctuation alone) scores 0.0.

    It is what the coherence gate's non-language rule reads (``gate.alphabetic_multiple``):
    a steered model can collapse into digits, codes and markup that the unsteered model
    finds likely enough to pass the perplexity rule. Unweighted by length, so it reads
    as "the share of its words that are words". A loop of letters ("hehehe…jobjob…")
    scores 1: that is :func:`repetition`'s to catch. Punctuation only separates, so
    quoting, bracketing or re-spacing a text leaves its share unchanged, and so does
    writing the same letters in another script.
    """
    alphabetic, total = alphabetic_tokens(text)
    return alphabetic / total if total else 0.0


def echo_fraction(text: str, prompt: str, n: int = 2) -> float:
    """Fraction of the generation's word tokens covered by an n-gram that occurs in the prompt.

    n shrinks to the prompt's length for prompts shorter than n words. Using n-grams rather
    than single tokens keeps a fluent text that merely mentions the concept word from
    counting as an echo. An empty generation or prompt scores 0.0.
    """
    gen, source = words(text), words(prompt)
    if not gen or not source:
        return 0.0
    size = min(n, len(source))
    prompt_grams = set(ngrams(source, size))
    covered = [False] * len(gen)
    for start, gram in enumerate(ngrams(gen, size)):
        if gram in prompt_grams:
            covered[start : start + size] = [True] * size
    return sum(covered) / len(gen)


def is_echo(text: str, prompt: str, threshold: float = ECHO_THRESHOLD) -> bool:
    """True when at least `threshold` of the generation repeats the prompt."""
    return echo_fraction(text, prompt) >= threshold


@dataclass(frozen=True)
class CoherenceReport:
    """Coherence checks for one generation; perplexity comes from the steering package."""

    n_words: int
    near_empty: bool
    repeated_trigram_fraction: float
    distinct_2: float
    echo_fraction: float | None
    is_echo: bool | None
    perplexity: float | None = None

    @property
    def flags(self) -> list[str]:
        """Names of the collapse checks that fired (empty when the text looks coherent)."""
        looping = self.repeated_trigram_fraction > LOOP_THRESHOLD
        checks = {"near_empty": self.near_empty, "looping": looping, "echo": self.is_echo}
        return [name for name, fired in checks.items() if fired]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def coherence_report(
    text: str, prompt: str | None = None, perplexity: float | None = None
) -> CoherenceReport:
    """Run every coherence check on one text (echo checks only when the prompt is given)."""
    echo = None if prompt is None else echo_fraction(text, prompt)
    echoed = None if echo is None else echo >= ECHO_THRESHOLD
    return CoherenceReport(
        n_words=len(words(text)),
        near_empty=is_near_empty(text),
        repeated_trigram_fraction=repeated_ngram_fraction(text, 3),
        distinct_2=distinct_n(text, 2),
        echo_fraction=echo,
        is_echo=echoed,
        perplexity=perplexity,
    )


_WHAT_IS = re.compile(r"\bwhat\s+is\b", re.IGNORECASE)


def question_marks(text: str) -> float:
    """Question marks in a text: the surface mark of a question-format direction (the
    first release's probes were trained on "What is X?")."""
    return float(text.count("?"))


def says_what_is(text: str) -> bool:
    """Whether a text says "what is", the first release's probe template."""
    return bool(_WHAT_IS.search(text))
