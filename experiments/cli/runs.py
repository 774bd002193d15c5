"""``steer-eval runs``: every kind of run with its verdicts per sign, without the UI.

A run id is what ``rescore``, ``--resume``, ``human`` and ``panel`` take; this lists
them with what each run answered (its ``criteria.csv``), newest first per experiment:
Phase 4, Phase 5 and the study, Phase 6, identify and the strength sweeps. Each cell
leads with the verdict's status, then its observed value and interval to three
significant digits (``+0.412 [+0.210, +0.600]``); a correlation corrected for
unreliability follows the observed one; a run without verdicts (a strength sweep) shows
what it answered in a line.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from experiments.tracking.listing import ListedRun, ListedVerdict

from experiments.answer import JUDGED, status_colour, status_word, value_interval
from experiments.cli.common import JsonOpt, friendly, out, print_json, warn_store
from experiments.rundir import RESCORED_TAG


def register(app: typer.Typer) -> None:
    app.command("runs")(friendly(runs))


def runs(
    experiment: Annotated[
        list[str] | None,
        typer.Option("--experiment", "-e", help="only this experiment (repeatable)"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="the newest N runs per experiment")] = 20,
    seed: Annotated[
        bool, typer.Option("--seed/--no-seed", help="also the seed design's criteria (c1-c4)")
    ] = False,
    json_: JsonOpt = False,
) -> None:
    """List each phase's runs with their verdicts per sign (the v2 criteria)."""
    from experiments import tracking
    from experiments.tracking.listing import list_runs

    listed = list_runs(experiment, limit)
    if json_:
        print_json(
            {
                "tracking_uri": tracking.tracking_uri(),
                "store_warnings": tracking.store_warnings(),
                "runs": [r.to_dict() for r in listed],
            }
        )
        return
    warn_store()
    if not listed:
        out.print(f"no runs in {tracking.tracking_uri()}; `make run` makes one", highlight=False)
        return
    for name in dict.fromkeys(r.experiment for r in listed):
        out.print(f"[bold]{escape(name)}[/] (newest first)", highlight=False)
        for r in (r for r in listed if r.experiment == name):
            print_run(r, [v for v in r.verdicts if seed or not _seed_criterion(v.key)])


def print_run(r: ListedRun, verdicts: list[ListedVerdict]) -> None:
    """One run: its id, start, status and name on a line of their own (whole, to copy),
    then its verdicts, a row per criterion and a column per group (a sign), each cell
    folded, never cut; a run without verdicts: what it answered, in a line."""
    head = f"{r.run_id} · {r.started} (UTC) · {r.status.lower()} · {escape(r.name)}"
    if r.rescored_with:  # its verdicts come from a rescore's changed settings
        head += f"\n[yellow]{escape(RESCORED_TAG)} {escape(r.rescored_with)}[/]"
    if not verdicts:
        out.print(f"  {head}\n    [dim]{escape(r.note)}[/]", highlight=False)
        return
    groups = list(dict.fromkeys(v.group for v in verdicts))
    table = Table(title=head, title_justify="left", title_style="", highlight=False)
    table.add_column("criterion", overflow="fold")
    for group in groups:  # a cell is a status and an interval: folded at its spaces
        table.add_column(group, overflow="fold")
    why = []  # a verdict that was not judged: its reason, under the table
    for label in dict.fromkeys(v.label for v in verdicts):
        status = {v.group: v for v in verdicts if v.label == label}
        why += unjudged(r.run_id, status.values())
        table.add_row(escape(label), *(_status(status.get(group)) for group in groups))
    out.print(table)
    for line in dict.fromkeys(why):
        out.print(f"[dim]{escape(line)}[/]", highlight=False)


def unjudged(run_id: str, verdicts: Iterable[ListedVerdict]) -> list[str]:
    """``run · criterion · group: reason`` for each verdict that was not judged (not
    evaluable, pending), the reason as the answer gives it."""
    return [
        f"{run_id[:8]} · {v.label} · {v.group}: {v.interval.reason}"
        for v in verdicts
        if v.status not in (*JUDGED, "corrected") and v.interval.reason
    ]


def _status(verdict: ListedVerdict | None) -> str:
    """A verdict's cell: its status in the answer's word and colour, then its observed
    value and interval (a verdict that was not judged has its reason under the table, as
    the answer says it; a corrected correlation has a value, no status)."""
    if verdict is None:
        return ""
    v = verdict.interval
    shown = escape(value_interval(v.estimate, v.low, v.high))
    if verdict.status == "corrected":
        return shown
    word = f"[{status_colour(verdict.status)}]{escape(status_word(verdict.status))}[/]"
    return f"{word}\n{shown}" if shown else word


def _seed_criterion(key: str) -> bool:
    """The seed's four criteria (c1-c4, without a v2_ prefix)."""
    return key[:1] == "c" and key[1:2].isdigit()
