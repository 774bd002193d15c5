"""``steer-eval export``: a run's directions as GGUF control vectors and safetensors.

The work is done in :mod:`experiments.pipeline.export`; this command finds the run and
prints what was written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, cast

import typer

from experiments.cli.common import DEFAULT_CONFIG, JsonOpt, console, friendly, out, print_json
from experiments.cli.human import ConfigOpt, ExperimentOpt, experiment_for


def register(app: typer.Typer) -> None:
    """Add the ``export`` command to ``app``."""
    app.command("export")(friendly(export))


def export(
    out_dir: Annotated[Path, typer.Argument(help="folder to write the vectors into")],
    run: Annotated[str, typer.Option(help="the Phase 5 parent run id, or latest")] = "latest",
    results_dir: Annotated[Path | None, typer.Option(help="local results folder")] = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    experiment: ExperimentOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Write a run's directions, scaled as steered (α·β), as llama.cpp control vectors
    (one <concept>.gguf each, for --control-vector) and one directions.safetensors."""
    from experiments import tracking
    from experiments.pipeline.export import export_run
    from experiments.rundir import RunDir

    experiment = experiment_for(run, config, experiment)
    # for --run latest, experiment_for names the experiment (the config's when not given)
    run_id = tracking.latest_parent_run(cast(str, experiment), "5") if run == "latest" else run
    folder = RunDir.locate(tracking.get_run(run_id), results_dir)
    result = export_run(folder, out_dir)
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
