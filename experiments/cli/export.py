"""``steer-eval export <run>``: a run's directions as GGUF control vectors and safetensors.

The run comes first, as in ``rescore`` (a Phase 5 parent run id, or ``latest``); the
folder is ``--out`` (default ``exports/<run id>``). The work is done in
:mod:`experiments.phase5.export`; this command finds the run and prints what was
written. A first argument that is no run is refused (exit 2) rather than guessed at: an
existing folder there is the old form (``export <folder> --run <run>``), and the message
gives the new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from mlflow.entities import Run

from experiments.cli.common import DEFAULT_CONFIG, JsonOpt, console, friendly, out, print_json
from experiments.cli.human import experiment_for

DEFAULT_OUT = Path("exports")  # a run's export goes to exports/<run id> unless --out


def register(app: typer.Typer) -> None:
    """Add the ``export`` command to ``app``."""
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
    config: Annotated[
        Path, typer.Option("--config", "-c", help="config whose experiment `latest` searches")
    ] = DEFAULT_CONFIG,
    experiment: Annotated[
        str | None,
        typer.Option(help="MLflow experiment `latest` searches (default: the config's)"),
    ] = None,
    json_: JsonOpt = False,
) -> None:
    """Write a run's directions, scaled as steered (α·β), as llama.cpp control vectors
    (one <concept>.gguf each, for --control-vector) and one directions.safetensors."""
    from experiments.phase5.export import export_run
    from experiments.rundir import RunDir

    found = resolve_export(run, old_run, experiment_for(run, config, experiment))
    run_id = found.info.run_id
    folder = RunDir.locate(found, results_dir)
    result = export_run(folder, out_dir if out_dir is not None else DEFAULT_OUT / run_id)
    if json_:
        print_json({"run_id": run_id, "folder": str(result.folder), **result.to_dict()})
        return
    from rich.table import Table

    table = Table("concept", "file", "scale α·β", title=f"exported run {run_id}")
    for synset, name in result.files.items():
        table.add_row(synset, name, f"{result.scales[synset]:.2f}")
    out.print(table)
    console.print(
        f"{result.model_id}, layer {result.layer} (llama.cpp's direction.{result.layer}); "
        f"written to {result.folder}: llama-cli -m <model.gguf> --control-vector "
        f"{result.folder}/<concept>.gguf"
    )
