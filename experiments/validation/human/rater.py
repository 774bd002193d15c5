"""The rating session (terminal-independent).

Why it works this way: the rater must stay blind to strength, Δ and source, so only the
text is shown; the concept is revealed only after the (optional) free-text topic guess,
which measures whether the text alone conveys the concept. Every answer is saved at once
(atomic rename of the working copy), so quitting, a crash or a closed terminal loses
nothing and the next session resumes at the first unrated sample.

Commands at any prompt: ``s`` skip, ``b`` back, ``q`` quit, ``h`` help. Input ends (EOF)
count as quit. Skipped samples stay unrated and come back first in the next session.

How the session is shown is a :class:`RaterUI`; the rich terminal one is
:mod:`experiments.cli.rater`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from experiments.rundir import restore
from experiments.validation.errors import ValidationInputError
from experiments.validation.human.answer_key import key_samples
from experiments.validation.human.csvio import (
    CSV_COLUMNS,
    RATING_COLUMNS,
    RATINGS_NAME,
    REDACTED,
    read_csv,
    write_csv,
)
from experiments.validation.human.ratings import (
    normalise_sample_id,
    parse_rating,
    parse_ratings,
)

COMMANDS = {"s": "skip", "b": "back", "q": "quit", "h": "help", "?": "help"}
GUESS_PROMPT = "What is this text about? (your guess, Enter for no idea)"


# --------------------------------------------------------------------------- the working copy


@dataclass
class Item:
    """One sample in the working copy."""

    sample_id: str
    text: str
    rating: int | None = None
    guess: str = ""

    def row(self) -> dict[str, str]:
        return {
            "sample_id": self.sample_id,
            "concept": REDACTED,
            "generated_text": self.text,
            "human_rating": "" if self.rating is None else str(self.rating),
            "topic_guess": self.guess,
        }


@dataclass
class RateSummary:
    path: Path
    total: int
    rated: int
    skipped: list[str] = field(default_factory=list)
    quit: bool = False


def load_items(path: Path, key: dict[str, Any]) -> list[Item]:
    """The working copy's samples in file order, checked against the answer key."""
    parsed = parse_ratings(path, key)
    if parsed.problems:
        raise ValidationInputError(
            f"{path} does not match the answer key ({len(parsed.problems)} problem(s)):\n"
            + "\n".join(f"  - {p}" for p in parsed.problems)
        )
    known = key_samples(key)
    _, rows = read_csv(path)
    items = []
    for row in rows:
        sid = normalise_sample_id(row.cells["sample_id"], known)
        rated = parsed.rows[sid]
        items.append(Item(sid, restore(row.cells["generated_text"]), rated.rating, rated.guess))
    return items


def save_items(path: Path, items: list[Item]) -> None:
    """Atomic rewrite of the whole working copy (small: tens of rows)."""
    write_csv(path, RATING_COLUMNS, (item.row() for item in items))


def prepare_ratings_file(csv_path: Path, key: dict[str, Any], ratings: Path | None = None) -> Path:
    """The working copy to rate into: reused when present, else made from the export."""
    csv_path = Path(csv_path)
    path = Path(ratings) if ratings is not None else csv_path.parent / RATINGS_NAME
    if path.exists():
        load_items(path, key)  # validates: a working copy from another export is refused
        return path
    read_csv(csv_path, CSV_COLUMNS)
    save_items(path, load_items(csv_path, key))
    return path


# --------------------------------------------------------------------------- the session


class RaterUI(Protocol):
    """How a rating session talks to the person rating."""

    def start(self, total: int, guess: bool) -> None:
        """Explain the task once."""

    def help(self) -> None: ...

    def show(self, item: Item, rated: int, total: int) -> None:
        """Show one sample's text (never its concept, strength or Δ) and progress."""

    def ask(self, prompt: str) -> str | None:
        """One answer line without its newline; None when the input has ended."""

    def reveal(self, concept_name: str) -> None: ...

    def invalid(self, reason: str) -> None:
        """The answer was not a rating; say why (the question is asked again)."""

    def at_first(self) -> None:
        """``back`` on the first sample."""

    def finished(self, summary: RateSummary) -> None: ...


def rate(
    path: Path,
    key: dict[str, Any],
    guess: bool,
    ui: RaterUI,
    on_save: Callable[[list[Item]], None] | None = None,
) -> RateSummary:
    """Rate the working copy's unrated samples one at a time; save after every answer."""
    items = load_items(path, key)
    samples = key_samples(key)
    total = len(items)
    revealed: set[str] = set()
    skipped: list[str] = []

    def rated() -> int:
        return sum(item.rating is not None for item in items)

    def save() -> None:
        save_items(path, items)
        if on_save:
            on_save(items)

    def next_unrated(after: int) -> int:
        for j in range(after + 1, total):
            if items[j].rating is None and items[j].sample_id not in skipped:
                return j
        return total

    def ask(prompt: str) -> tuple[str, str | None] | None:
        """The answer, stripped, and the command it is (help shown and the question asked
        again); None when the input has ended."""
        while (answer := ui.ask(prompt)) is not None:
            command = COMMANDS.get(answer.strip().lower())
            if command != "help":
                return answer.strip(), command
            ui.help()
        return None

    def finish(quit_: bool) -> RateSummary:
        save()
        summary = RateSummary(path, total, rated(), sorted(skipped), quit_)
        ui.finished(summary)
        return summary

    ui.start(total, guess)
    i = next_unrated(-1)
    while i < total:
        item = items[i]
        ui.show(item, rated(), total)
        move: str | None = None
        if guess and not item.guess and item.rating is None and item.sample_id not in revealed:
            if (asked := ask(GUESS_PROMPT)) is None:
                return finish(True)
            text, move = asked
            if move is None:
                item.guess = text
                save()
        if move is None:
            revealed.add(item.sample_id)
            name = samples[item.sample_id]["concept_name"]
            ui.reveal(name)
            keep = f", Enter keeps {item.rating}" if item.rating is not None else ""
            question = f"How strongly does this text relate to {name}? (0-10{keep})"
            while True:
                if (asked := ask(question)) is None:
                    return finish(True)
                text, move = asked
                if move is not None:
                    break
                if not text and item.rating is not None:
                    move = "next"
                    break
                value, reason = parse_rating(text) if text else (None, "no answer")
                if value is None:
                    ui.invalid(reason or "no answer")
                    continue
                item.rating = value
                if item.sample_id in skipped:
                    skipped.remove(item.sample_id)
                save()
                move = "next"
                break
        if move == "quit":
            return finish(True)
        if move == "back":
            if i == 0:
                ui.at_first()
            i = max(i - 1, 0)
            continue
        if move == "skip" and item.rating is None and item.sample_id not in skipped:
            skipped.append(item.sample_id)
        i = next_unrated(i)
    return finish(False)
