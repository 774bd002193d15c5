"""The rich terminal face of the Part B rating session.

The session itself (order, skip/back/quit, saving) is
:func:`experiments.validation.human.rater.rate`; this module only shows it. Generated
text is untrusted, so it is shown as a rich ``Text`` (markup in it is printed, never
interpreted) with control characters replaced.
"""

from __future__ import annotations

import re
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from experiments.validation.human.rater import Item, RateSummary

HELP = (
    "Type your answer and press Enter. Commands: [bold]s[/] skip this sample, [bold]b[/] go "
    "back one, [bold]q[/] quit (everything is saved; run the same command to resume)."
)
_DISPLAY_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _display(text: str) -> Text:
    clean = _DISPLAY_CONTROL.sub("\ufffd", text.replace("\r\n", "\n").replace("\r", "\n"))
    if not clean.strip():
        return Text("(empty text)", style="dim italic")
    return Text(clean)


def _bar(done: int, total: int, width: int = 20) -> str:
    filled = round(width * done / total) if total else width
    return "█" * filled + "░" * (width - filled)


class TerminalRater:
    """A :class:`~experiments.validation.human.rater.RaterUI` on a rich console, reading
    answers line by line from ``stream``."""

    def __init__(self, console: Console, stream: TextIO) -> None:
        self.console = console
        self.stream = stream

    def start(self, total: int, guess: bool) -> None:
        self.console.print(
            f"[bold]Blind rating[/]: {total} texts. You will not see the steering strength, "
            "the score or where a text came from."
            + (" First guess what each text is about, then" if guess else " For each text,")
            + " rate how strongly it relates to the concept shown (0 = not at all, 10 = "
            "entirely about it)."
        )
        self.help()

    def help(self) -> None:
        self.console.print(HELP)

    def show(self, item: Item, rated: int, total: int) -> None:
        self.console.print()
        self.console.print(
            Panel(
                _display(item.text),
                title=f"sample {item.sample_id}",
                subtitle=f"{_bar(rated, total)} {rated}/{total} rated",
            )
        )
        if item.rating is not None:
            self.console.print(f"[dim]current rating: {item.rating}[/]")

    def ask(self, prompt: str) -> str | None:
        self.console.print(prompt, end=" ", markup=False, highlight=False)
        line = self.stream.readline()
        if not line:
            self.console.print()
            return None
        return line.rstrip("\r\n")

    def reveal(self, concept_name: str) -> None:
        self.console.print(
            f"The concept is: [bold magenta]{escape(concept_name)}[/]", highlight=False
        )

    def invalid(self, reason: str) -> None:
        self.console.print(
            f"[red]{escape(reason)}[/]: type a whole number from 0 to 10, or s, b, q",
            highlight=False,
        )

    def at_first(self) -> None:
        self.console.print("[yellow]already at the first sample[/]")

    def finished(self, summary: RateSummary) -> None:
        left = summary.total - summary.rated
        self.console.print(
            f"[bold]saved[/] {summary.rated}/{summary.total} rated to {summary.path}"
            + (f"; {left} left - run the same command to continue" if left else "; all done")
        )
