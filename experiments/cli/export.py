"""``steer-eval export <run>``: a run's directions as GGUF control vectors and safetensors.

The run comes first, as in ``rescore`` (a Phase 5 parent run id, or ``latest``); the
folder is ``--out`` (default ``exports/<run id>``); the work is done in
:mod:`experiments.phase5.export`. A first argument that is no run is refused (exit 2)
rather than guessed at: an existing folder there is the old form (``export <folder> --run
<run>``), and the message gives the new one.

``--check`` then applies each exported file (or a fixed sample, ``--concepts K``) in
llama.cpp and by the run's own hook, and compares the NLL shifts they cause
(:mod:`experiments.phase5.export_check`): a table, or ``--json``, and ``check.json`` in
the folder; exit 1 when the agreement is under the threshold.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

if TYPE_CHECKING:
    from mlflow.entities import Run

    from experiments.phase5.export import Export
    from experiments.phase5.export_check import ExportCheck
    from experiments.rundir import RunDir

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
    require_extra,
)
from experiments.cli.human import experiment_for

DEFAULT_OUT = Path("exports")  # a run's export goes to exports/<run id> unless --out


def register(app: typer.Typer) -> None:
    app.command("export")(friendly(export))


def _new_form(run: str, folder: str) -> str:
    return f"`steer-eval export {run} --out {folder}`"


def resolve_export(run: str, old_run: str | None, experiment: str | None) -> Run:
    """The MLflow run ``run`` names (an id, or ``latest`` in ``experiment``), or an
    ExportError saying why not and the command that works."""
    from experiments import tracking
    from experiments.phase5.export import ExportError

    if old_run is not None:
        folder = run if run != "latest" else "<folder>"
        raise ExportError(
            f"export takes the run first and the folder by --out now: {_new_form(old_run, folder)}"
        )
    if run == "latest":
        assert experiment is not None  # experiment_for names one for "latest"
        return tracking.get_run(tracking.latest_parent_run(experiment, "5"))
    try:
        return tracking.get_run(run)
    except LookupError as exc:
        if Path(run).is_dir():
            raise ExportError(
                f"{run!r} is a folder, not a run: export takes the run first and the folder "
                f"by --out now: {_new_form('<run id>', run)} (or `latest`)"
            ) from None
        raise ExportError(
            f"{run!r} is neither a run nor `latest` ({exc}); the form is "
            f"{_new_form('<run id>|latest', '<folder>')}"
        ) from None


def export(
    run: Annotated[
        str, typer.Argument(help="the Phase 5 parent run id, or latest (as in rescore)")
    ] = "latest",
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="folder to write the vectors into (default: exports/<run id>)"
        ),
    ] = None,
    old_run: Annotated[str | None, typer.Option("--run", hidden=True)] = None,
    results_dir: Annotated[Path | None, typer.Option(help="local results folder")] = None,
    config: LatestConfigOpt = DEFAULT_CONFIG,
    experiment: LatestExperimentOpt = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="apply the files in llama.cpp and by the run's hook and compare the NLL "
            "shifts they cause (writes check.json; exit 1 if r < --threshold)",
        ),
    ] = False,
    concepts: Annotated[
        int | None,
        typer.Option("--concepts", min=1, help="--check a fixed sample of K concepts"),
    ] = None,
    gguf: Annotated[
        Path | None,
        typer.Option(help="--check: the model GGUF (default: the embedded model's)"),
    ] = None,
    threshold: Annotated[
        float, typer.Option(help="--check passes when Pearson r of the shifts is at least this")
    ] = 0.95,
    json_: JsonOpt = False,
) -> None:
    """Write a run's directions, scaled as steered (α·β), as llama.cpp control vectors
    (one <concept>.gguf each, for --control-vector) and one directions.safetensors."""
    if check:  # before the run is read or a file written
        require_extra("llama_cpp", "export --check", "export without --check")
    from experiments.phase5.export import export_run
    from experiments.rundir import RunDir

    found = resolve_export(run, old_run, experiment_for(run, config, experiment))
    run_id = phase5_parent(found.info.run_id, "export")
    folder = RunDir.locate(found, results_dir)
    result = export_run(folder, out_dir if out_dir is not None else DEFAULT_OUT / run_id)
    checked = _check(folder, result.folder, gguf, concepts, threshold) if check else None
    if json_:
        extra = {"check": checked.to_dict()} if checked is not None else {}
        print_json({"run_id": run_id, "folder": str(result.folder), **result.to_dict(), **extra})
    else:
        _print_export(run_id, result)
        if checked is not None:
            _print_check(checked)
    if checked is not None and not checked.passed:
        raise typer.Exit(1)


def _check(
    run_dir: RunDir, folder: Path, gguf: Path | None, k: int | None, threshold: float
) -> ExportCheck:
    """Load the run's model and llama.cpp's GGUF and run the check."""
    from experiments.cli.common import progress_bars
    from experiments.phase5.export import ExportError
    from experiments.phase5.export_check import check_export, gguf_for, run_texts

    config = run_dir.read_record(migrate=True).config
    gguf = gguf or gguf_for(config.model)
    if gguf is None:
        raise ExportError(
            f"--check needs the GGUF of {config.model} for llama.cpp; pass --gguf <model.gguf>"
        )
    texts = run_texts(run_dir)
    with progress_bars() as report:
        return check_export(
            folder, config.model_spec.load, gguf, texts, k, threshold, progress=report
        )


def _print_check(checked: ExportCheck) -> None:
    table = Table("shifts", "n", "Pearson r", "slope (llama.cpp on hook)", title="export check")
    rows = [("all", checked.overall)] + [(f"sign {k}", v) for k, v in checked.by_sign.items()]
    for name, a in rows:
        table.add_row(name, str(a.n), f"{a.r:.3f}", f"{a.slope:.3f}")
    out.print(table)
    verdict = "[green]pass[/]" if checked.passed else "[red]fail[/]"
    console.print(
        f"{verdict}: r = {checked.overall.r:.3f} (threshold {checked.threshold:g}) over "
        f"{len(checked.concepts)} concepts × 2 signs × their texts; mean per-token NLL shift "
        f"by llama.cpp ({checked.gguf.name}, {_directions(checked.layers)}) vs the run's hook; "
        f"written to {checked.folder / 'check.json'}"
    )


def _directions(layers: list[int]) -> str:
    """``direction.9``, or every layer of a file steered as deployed."""
    if len(layers) == 1:
        return f"direction.{layers[0]}"
    return f"direction.{layers[0]} to direction.{layers[-1]}, {len(layers)} layers"


def _print_export(run_id: str, result: Export) -> None:
    table = Table("concept", "file", "scale α·β", title=f"exported run {run_id}")
    for synset, name in result.files.items():
        table.add_row(synset, name, f"{result.scales[synset]:.2f}")
    out.print(table)
    console.print(
        f"{result.model_id}, layer {result.layer} (llama.cpp's "
        f"{_directions(result.layers or [result.layer])}); "
        f"written to {result.folder}: llama-cli -m <model.gguf> --control-vector "
        f"{result.folder}/<concept>.gguf"
    )
