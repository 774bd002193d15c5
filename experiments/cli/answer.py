"""The answer block in the terminal: what ``run``, ``rescore`` and ``calibrate`` print
last, from the same builders as ``answer.md`` and the MLflow description."""

from __future__ import annotations

from rich.table import Table

from experiments.cli.common import out

STATUS_COLOURS = {"pass": "green", "fail": "red", "inconclusive": "yellow"}


def print_answer(answer) -> None:
    """The answer block (experiments.pipeline.answer) as terminal tables."""
    from experiments.pipeline.answer import SEED_LABEL, SIGN_LABELS, fmt, interval_text

    def status(text: str) -> str:
        return f"[{STATUS_COLOURS.get(text, 'dim')}]{text}[/]"

    out.print(f"[bold]The answer[/] (run {answer.run_id})", highlight=False)
    out.print(f"[bold]Question.[/] {answer.question}", highlight=False)
    for sign, text in answer.headlines.items():
        out.print(f"  [bold]{SIGN_LABELS[sign]}:[/] {text.replace('**', '')}", highlight=False)
    table = Table(title="criteria v2 (pass: interval above the threshold; fail: below)")
    table.add_column("sign", no_wrap=True)
    table.add_column("criterion (v2)")
    table.add_column("value", no_wrap=True, justify="right")
    table.add_column(f"{answer.confidence:.0%} interval", no_wrap=True)
    table.add_column("threshold", no_wrap=True, justify="right")
    table.add_column("status", no_wrap=True)
    for v in answer.verdicts:
        table.add_row(
            SIGN_LABELS[v.sign],
            v.label,
            fmt(v.value),
            interval_text(v),
            f"{v.threshold:g}",
            status(v.status),
        )
    out.print(table)
    seed = Table("criterion (seed)", "value", "threshold", "status", "note", title=SEED_LABEL)
    for v in answer.seed:
        seed.add_row(v.key, fmt(v.value), f"{v.threshold:g}", status(v.status), v.reason)
    out.print(seed)


def print_study_answer(answer: dict) -> None:
    """Phase 6's answer (experiments.calibration.publish.study_answer): the question and
    the main predictor's slope per sign and direction source."""
    from experiments.calibration.publish import SIGN_WORDS

    out.print(f"[bold]The answer[/] (Phase 6 run {answer['run_id']})", highlight=False)
    out.print(f"[bold]Question.[/] {answer['question']}", highlight=False)
    for h in answer["headlines"]:
        where = f"{SIGN_WORDS.get(h['sign'], h['sign'])}, {h['source']} (L{h['layer']})"
        out.print(f"  [bold]{where}:[/] {h['text'].replace('**', '')}", highlight=False)
