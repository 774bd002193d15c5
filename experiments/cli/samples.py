"""``steer-eval samples [RUN]``: the texts behind a run's verdicts, in the terminal.

A verdict pools hundreds of texts; what a researcher reads first is the texts. This
prints a Phase 5 run's ``samples.csv`` (``phase5/samples.py``: every steered text of
the report split beside its unsteered and random-direction twins), text first and
wrapped, each with its Δ, the gate's verdict and reason and its effect, then its twins
with theirs. The run is taken as ``rescore`` and ``export`` take it; the options choose
the rows and the form. A run that does not exist or is no Phase 5 run, or a concept that
is not in it, is refused with exit 2 (the concept with the closest name in the run, the
run's kind and what takes it).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from experiments.cli.common import (
    DEFAULT_CONFIG,
    JsonOpt,
    LatestConfigOpt,
    LatestExperimentOpt,
    console,
    friendly,
    out,
    phase5_parent,
    print_json,
)
from experiments.cli.human import latest_run

if TYPE_CHECKING:
    from rich.panel import Panel
    from rich.text import Text


def register(app: typer.Typer) -> None:
    app.command("samples")(friendly(samples))


def samples(
    run: Annotated[
        str, typer.Argument(help="the Phase 5 parent run id, or latest (as in rescore)")
    ] = "latest",
    concept: Annotated[
        str | None,
        typer.Option("--concept", help="only this concept: its synset, or the start of one (herb)"),
    ] = None,
    sign: Annotated[
        Literal["pos", "neg", "+", "-"] | None,
        typer.Option("--sign", help="only the texts steered at s > 0 (pos, +) or s < 0 (neg, -)"),
    ] = None,
    gated: Annotated[
        bool | None,
        typer.Option(
            "--gated/--measured",
            help="only the texts the coherence gate failed (--gated) or passed (--measured)",
        ),
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="at most N")] = None,
    oneline: Annotated[
        bool,
        typer.Option(
            "--oneline",
            help="one line per text: sign, strength, concept, Δ, gate, effect, then the text "
            "(cut at the terminal's width)",
        ),
    ] = False,
    results_dir: Annotated[
        Path | None, typer.Option(help="the results folder (default: the run's own)")
    ] = None,
    config: LatestConfigOpt = DEFAULT_CONFIG,
    experiment: LatestExperimentOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Print a run's steered texts, each beside its unsteered and random twins, with
    what the gate and the effect made of each (the run folder's samples.csv)."""
    from experiments import tracking
    from experiments.phase5.samples import read_samples, select_samples
    from experiments.rundir import RunDir

    run_id = latest_run(config, experiment) if run == "latest" else phase5_parent(run, "samples")
    folder = RunDir.locate(tracking.get_run(run_id), results_dir)
    table = read_samples(folder)
    symbol = None if sign is None else "+" if sign in ("pos", "+") else "-"
    matching = select_samples(table, concept, symbol, gated)
    rows = matching.head(limit) if limit is not None else matching
    records = [{str(k): _plain(v) for k, v in r.items()} for r in rows.to_dict("records")]
    if json_:  # n: the texts the filters chose (all of --limit's); total: the run's
        print_json(
            {
                "run_id": run_id,
                "folder": str(folder.path),
                "n": len(matching),
                "total": len(table),
                "samples": records,
            }
        )
        return
    for record in records:
        out.print(_line(record) if oneline else _sample(record))
    chosen = f" ({len(matching)} matching)" if len(matching) != len(table) else ""
    console.print(
        f"{len(records)} of {len(table)} samples{chosen} of run {run_id} "
        f"({folder.file(RunDir.SAMPLES)})",
        highlight=False,
        markup=False,
    )


def _line(r: dict[str, Any]) -> Text:
    """One sample on one line: what was measured first, in columns, then the text with its
    whitespace folded, cut with … at the terminal's width (never markup)."""
    from rich.text import Text

    sign = "+" if str(r.get("sign") or "").endswith("> 0") else "-"
    strength = r.get("strength")
    head = " ".join(
        [
            sign,
            f"s={_number(strength, '+g')}" if strength is not None else "s=–",
            str(r.get("concept")),
            f"Δ{_number(r.get('delta_s'))}",
            "gated" if r.get("gate") == "fail" else "     ",
            f"e{_number(r.get('effect_gated'))}",
        ]
    )
    line = Text(head + " │ ", style="dim", no_wrap=True, overflow="ellipsis")
    text = " ".join(str(r.get("text") or "").split())
    line.append(text, "red" if r.get("gate") == "fail" else "")
    return line


def _plain(value: Any) -> Any:
    """A cell as JSON has it: NaN as None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item"):
        value = value.item()
    return value


def _number(value: Any, spec: str = "+.3f") -> str:
    return "–" if value is None else format(float(value), spec)


def _gate(gate: Any, reason: Any) -> str:
    if gate is None:
        return "gate –"
    return f"gate {gate}" + (f" ({reason})" if reason else "")


def _measured(ratio: Any, repetition: Any, share: Any) -> str:
    """What the gate read of a twin, where the table has it (an earlier run's lacks it):
    perplexity over its concept's unsteered median, repetition, share of alphabetic words."""
    parts = [
        f"perplexity ×{_number(ratio, '.1f')}" if ratio is not None else "",
        f"repetition {_number(repetition, '.1f')}" if repetition is not None else "",
        f"alphabetic words {_number(share, '.0%')}" if share is not None else "",
    ]
    shown = " · ".join(p for p in parts if p)
    return f" · {shown}" if shown else ""


def _sample(r: dict[str, Any]) -> Panel:
    """One sample as a rich block: the steered text first, wrapped, then what was
    measured on it; its twins' texts below, each with its own numbers. Texts are the
    model's: shown as text, never as markup."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    def twin(label: str, text: Any, numbers: str) -> list[Text]:
        if text is None and numbers == "":
            return []
        return [
            Text.assemble((f"{label}: ", "bold"), str(text or "")),
            Text(f"   {numbers}", style="dim"),
        ]

    strength = r.get("strength")
    head = " · ".join(
        part
        for part in [
            str(r.get("concept")),
            str(r.get("sign") or ""),
            f"s = {_number(strength, '+g')}" if strength is not None else "",
            f"Δ {_number(r.get('delta_s'))}",
            _gate(r.get("gate"), r.get("gate_reason")),
            f"e {_number(r.get('effect'))} (gated {_number(r.get('effect_gated'))}, "
            f"above null {_number(r.get('effect_above_null'))})",
        ]
        if part
    )
    failed = r.get("gate") == "fail"
    body = [
        Text(str(r.get("text") or ""), style="red" if failed else ""),
        Text(head, style="dim"),
        *twin(
            "unsteered",
            r.get("text_unsteered"),
            f"Δ0 {_number(r.get('delta_0'))} · "
            + _gate(r.get("gate_unsteered"), r.get("gate_reason_unsteered"))
            + _measured(None, None, r.get("alphabetic_share_unsteered")),
        ),
        *twin(
            "random",
            r.get("text_random"),
            ""
            if r.get("text_random") is None
            else f"Δ {_number(r.get('delta_random'))} · "
            + _gate(r.get("gate_random"), r.get("gate_reason_random"))
            + f" · e {_number(r.get('effect_random'))}"
            + _measured(
                r.get("perplexity_ratio_random"),
                r.get("repetition_random"),
                r.get("alphabetic_share_random"),
            ),
        ),
    ]
    tail = [
        f"prompt {r.get('prompt')!r}" if r.get("prompt") is not None else "",
        f"perplexity ×{_number(r.get('perplexity_ratio'), '.1f')} of the unsteered median"
        if r.get("perplexity_ratio") is not None
        else "",
        f"repetition {_number(r.get('repetition'), '.1f')}" if r.get("repetition") else "",
        f"alphabetic words {_number(r.get('alphabetic_share'), '.0%')}"
        if r.get("alphabetic_share") is not None
        else "",
        f"trace {r['trace_id']}" if r.get("trace_id") else "",
        f"key {r.get('key')}",
    ]
    body.append(Text(" · ".join(t for t in tail if t), style="dim"))
    return Panel(Group(*body))
