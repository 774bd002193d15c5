"""``steer-eval human export|rate|import``: Phase 5 Part B, blind human validation of Δ.

The work is done in :mod:`experiments.validation.human`; these commands parse options
and print. ``--run latest`` looks in the experiment named by ``--experiment``, else by
the ``--config`` file's experiment (``tracking.experiment``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from experiments.cli.common import DEFAULT_CONFIG, JsonOpt, console, friendly, out, print_json
from experiments.validation.human.csvio import CSV_NAME, RATINGS_NAME
from experiments.validation.human.export import DEFAULT_N
from experiments.validation.human.importer import CHILD_RUN_NAME, DEFAULT_MIN_RATED

RunOpt = Annotated[str, typer.Option("--run", help="the Phase 5 parent run id, or latest")]
ResultsOpt = Annotated[
    Path | None,
    typer.Option(help="local Phase 5 results folder (default: the run's own setting)"),
]
ConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", help="config whose experiment --run latest uses")
]
ExperimentOpt = Annotated[
    str | None,
    typer.Option(help="MLflow experiment for --run latest (default: the config's)"),
]


def experiment_for(run: str | None, config: Path, experiment: str | None) -> str | None:
    """The experiment ``--run latest`` searches; None when a run id was given."""
    if run != "latest" or experiment is not None:
        return experiment
    from experiments.config import load_config

    return load_config(config, phase="phase5").experiment


def latest_run(config: Path, experiment: str | None) -> str:
    """The run ``latest`` names: the newest finished Phase 5 parent run of ``experiment``,
    else of the config's experiment."""
    from experiments import tracking

    found = experiment_for("latest", config, experiment)
    assert found is not None  # for "latest", experiment_for always names one
    return tracking.latest_parent_run(found, "5")


def register(app: typer.Typer) -> None:
    human = typer.Typer(
        help="Phase 5 Part B: blind human validation of Δ (export, rate, import).",
        no_args_is_help=True,
    )
    human.command("export")(friendly(export))
    human.command("rate")(friendly(rate))
    human.command("import")(friendly(import_))
    app.add_typer(human, name="human")


def export(
    run: RunOpt,
    n: Annotated[int, typer.Option("--n", help="samples to draw")] = DEFAULT_N,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="output folder (default results/phase5/<run>/human)")
    ] = None,
    results_dir: ResultsOpt = None,
    force: Annotated[bool, typer.Option(help="replace a different earlier export")] = False,
    config: ConfigOpt = DEFAULT_CONFIG,
    experiment: ExperimentOpt = None,
) -> None:
    """Draw a stratified, blinded sample to rate; write the CSV and its answer key."""
    from experiments.validation.human.export import ARTIFACT_DIR, export_samples

    result = export_samples(
        run,
        n=n,
        seed=seed,
        out=out,
        results_dir=results_dir,
        force=force,
        experiment=experiment_for(run, config, experiment),
    )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    console.print(
        f"exported {result.n} samples from {len(result.cells)} concept × strength cells "
        f"(per cell: {min(result.cells.values())}-{max(result.cells.values())})"
    )
    console.print(f"rate:       {result.csv_path}")
    console.print(f"answer key: {result.key_path} (do not open it before rating)")
    console.print(f"logged under {ARTIFACT_DIR}/ of run {result.run_id}")


def rate(
    csv_path: Annotated[
        Path | None, typer.Option("--csv", help="an exported human_validation.csv")
    ] = None,
    run: Annotated[str | None, typer.Option("--run", help="rate this run's export")] = None,
    key: Annotated[Path | None, typer.Option(help="answer key (default: beside the CSV)")] = None,
    ratings: Annotated[
        Path | None,
        typer.Option(help=f"working copy to save to (default: {RATINGS_NAME} beside the CSV)"),
    ] = None,
    guess: Annotated[
        bool, typer.Option("--guess/--no-guess", help="ask for a topic guess first")
    ] = True,
    results_dir: ResultsOpt = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    experiment: ExperimentOpt = None,
) -> None:
    """Rate the samples one at a time in the terminal; saves after every answer."""
    import sys

    from rich.console import Console

    from experiments.cli.rater import TerminalRater
    from experiments.validation.errors import ValidationInputError
    from experiments.validation.human.answer_key import KEY_NAME, load_answer_key
    from experiments.validation.human.export import fetch_export
    from experiments.validation.human.rater import prepare_ratings_file, rate
    from experiments.validation.runs import phase5_parent

    if (csv_path is None) == (run is None):
        raise ValidationInputError("give exactly one of --csv PATH or --run RUN_ID")
    run_id = None
    if run is not None:
        parent = phase5_parent(run, experiment_for(run, config, experiment), results_dir)
        run_id = parent.run_id
        csv_path = fetch_export(parent) / CSV_NAME
    assert csv_path is not None
    answer_key = load_answer_key(key or csv_path.parent / KEY_NAME, run_id)
    path = prepare_ratings_file(csv_path, answer_key, ratings)
    summary = rate(path, answer_key, guess, TerminalRater(Console(highlight=False), sys.stdin))
    if summary.rated >= DEFAULT_MIN_RATED:
        console.print(f"import with: steer-eval human import {path} --run {answer_key['run_id']}")


def import_(
    run: RunOpt,
    csv_path: Annotated[
        Path | None,
        typer.Argument(help="the rated CSV (default: the rater's file for this run)"),
    ] = None,
    key: Annotated[
        Path | None, typer.Option(help="answer key (default: beside the CSV, else MLflow)")
    ] = None,
    min_rated: Annotated[
        int, typer.Option(help="rated samples needed before r is computed")
    ] = DEFAULT_MIN_RATED,
    rater: Annotated[
        str | None,
        typer.Option(help="the rater's id on each rating's trace feedback (default: $USER)"),
    ] = None,
    results_dir: ResultsOpt = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    experiment: ExperimentOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Validate ratings, correlate them with Δ and record criterion 4."""
    from experiments.validation.human.importer import import_ratings
    from experiments.validation.runs import phase5_parent

    experiment = experiment_for(run, config, experiment)
    if csv_path is None:
        parent = phase5_parent(run, experiment, results_dir)
        run = parent.run_id
        csv_path = parent.folder.human / RATINGS_NAME
    result = import_ratings(
        csv_path,
        run,
        key_path=key,
        min_rated=min_rated,
        results_dir=results_dir,
        experiment=experiment,
        rater=rater,
    )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    if json_:
        print_json(
            {
                "run_id": result.run_id,
                "child_run_id": result.child_run_id,
                "n_samples": result.n_samples,
                "n_rated": result.n_rated,
                "pearson": result.pearson.to_dict(),
                "spearman": result.spearman.to_dict(),
                "guess_accuracy": result.guess_accuracy,
                "n_guessed": result.n_guessed,
                "criterion": result.criterion.to_dict(),
                "combined": result.combined.to_dict(),
                "trace_feedback": result.trace_feedback,
                "warnings": result.warnings,
            }
        )
        return
    table = Table("statistic", "value", "95% CI", "n", title="human rating vs Δ")
    for label, corr in (("Pearson r", result.pearson), ("Spearman ρ", result.spearman)):
        if corr.evaluable:
            table.add_row(
                label, f"{corr.r:.3f}", f"[{corr.ci_low:.3f}, {corr.ci_high:.3f}]", str(corr.n)
            )
        else:
            table.add_row(label, "n/a", corr.reason, str(result.n_rated))
    if result.guess_accuracy is not None:
        table.add_row(
            "topic-guess accuracy", f"{result.guess_accuracy:.3f}", "", str(result.n_guessed)
        )
    out.print(table)
    console.print(
        f"criterion {result.criterion.key}: [bold]{result.criterion.status}[/] "
        f"({result.criterion.reason})",
        highlight=False,
    )
    console.print(
        f"criterion {result.combined.key}: [bold]{result.combined.status}[/]", highlight=False
    )
    fb = result.trace_feedback
    console.print(
        f"logged to child run {result.child_run_id} ({CHILD_RUN_NAME}); trace feedback: "
        f"{fb.get('logged', 0)} new, {fb.get('overridden', 0)} replaced, "
        f"{fb.get('unchanged', 0)} unchanged, {fb.get('untraced', 0)} without a trace"
    )
