"""The answer block in the terminal: what ``run``, ``rescore``, ``calibrate`` and
``identify`` print last, from the same :class:`experiments.answer.Answer` as
``answer.md``, ``criteria.csv``, ``--json`` and the MLflow descriptions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

from experiments.cli.common import out

if TYPE_CHECKING:
    from pathlib import Path

    from experiments.answer import Answer


def print_answer(answer: Answer) -> None:
    """Any phase's answer block (experiments.answer.Answer) as terminal tables."""
    from experiments.answer import interval_text, number, reading, status_colour, status_word

    def status(text: str) -> str:
        return f"[{status_colour(text)}]{status_word(text)}[/]"

    out.print(f"[bold]The answer[/] (run {answer.run_id})", highlight=False)
    out.print(f"[bold]Question.[/] {answer.question}", highlight=False)
    for group, text in answer.headlines().items():
        out.print(f"  [bold]{group}:[/] {text}", highlight=False)
    for note in answer.notes:
        out.print(f"  {note}", highlight=False)
    table = Table(title="criteria (pass: interval beyond the threshold; fail: short of it)")
    table.add_column("group")
    table.add_column("criterion")
    table.add_column("value", no_wrap=True, justify="right")
    table.add_column(f"{answer.confidence:.0%} interval", no_wrap=True)
    table.add_column("threshold", no_wrap=True, justify="right")
    table.add_column("status", no_wrap=True)
    table.add_column("reading")
    for v in answer.verdicts:
        table.add_row(
            v.group,
            v.label,
            number(v.value),
            interval_text(v),
            f"{v.threshold:g}",
            status(v.status),
            reading(v),
        )
    out.print(table)
    for extra in answer.tables:
        shown = Table(*extra.columns, title=extra.title)
        for row in extra.rows:  # cells in words, never markup
            shown.add_row(*(Text(cell) for cell in row))
        out.print(shown)
    if answer.seed:
        seed = Table(
            "criterion (seed)", "value", "threshold", "status", "note", title=answer.seed_label
        )
        for v in answer.seed:
            seed.add_row(v.key, number(v.value), f"{v.threshold:g}", status(v.status), v.reason)
        out.print(seed)


def result_json(
    answer: Answer, run_dir: Path, results: object, timings: dict[str, float]
) -> dict[str, Any]:
    """``--json``'s one shape for every phase: where the run is, its answer (plain text,
    per criterion value, low, high, status, threshold), the phase's results, timings."""
    from experiments import tracking

    return {
        "phase": answer.phase,
        "run_id": answer.run_id,
        "ui_url": tracking.run_ui_url(answer.run_id),
        "run_dir": str(run_dir),
        "answer": answer.to_dict(),
        "results": results,
        "timings": timings,
    }
