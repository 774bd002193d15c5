"""``steer-eval calibrate``: Phase 6, probes along a training curve."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from experiments.cli.answer import print_answer, result_json
from experiments.cli.common import (
    ConceptsOpt,
    ConfigOpt,
    JsonOpt,
    ModelOpt,
    SetOpt,
    StudyDryRunOpt,
    VerboseOpt,
    console,
    friendly,
    print_json,
    require_extra,
    resolve_config,
    resolve_run,
    say_stage,
    setup_logging,
    show_run_address,
)
from experiments.cli.plan import print_study_plan
from experiments.strength_range import kept_keys

if TYPE_CHECKING:
    from experiments.config import CalibrationStudyConfig
    from experiments.kernel.estimate import Plan


def register(app: typer.Typer) -> None:
    app.command()(friendly(calibrate))


def calibrate(
    config: ConfigOpt = Path("configs/phase6.yaml"),
    set_: SetOpt = None,
    model: ModelOpt = None,
    concepts: ConceptsOpt = None,
    quick: Annotated[
        bool, typer.Option(help="a 3-concept smoke version: configs/quick/calibrate.yaml")
    ] = False,
    resume: Annotated[
        str | None, typer.Option(help="finish an interrupted study by id, or latest")
    ] = None,
    dry_run: StudyDryRunOpt = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Phase 6: probes along a training curve; does detection quality predict steering?"""
    from experiments.calibration import QUICK

    overlays = [QUICK] if quick else []
    cfg = cast(  # load_config refuses a config of another phase
        "CalibrationStudyConfig",
        resolve_config(config, set_, model, None, concepts, "calibration", overlays),
    )
    if cfg.execution.executor == "ray":  # before anything loads
        require_extra("ray", "execution.executor ray", "--set execution.executor=local")
    setup_logging(verbose)
    from experiments.calibration.study import PHASE, run_calibration

    explicit = kept_keys(set_, cfg, config, overlays)
    if dry_run:
        from experiments.calibration.study import STAGES, strength_choices

        def strength(plan: Plan, layers: list[int]) -> list[str]:
            chosen = strength_choices(cfg, plan.model.probe_id, layers, explicit)
            return [f"{key}: {c['message']}" for key, c in chosen.items()]

        print_study_plan(cfg, PHASE, STAGES, json_, cfg.calibration.layers or [], strength)
        return
    if resume is not None:
        resume = resolve_run(resume, cfg.experiment, PHASE, finished=False)
    start = time.monotonic()
    with console.status("Phase 6 calibration study") as status:
        result = run_calibration(
            cfg,
            resume=resume,
            progress=lambda msg: say_stage(status, msg, start),
            explicit=explicit,
        )
    from experiments.calibration.answer import answer_of

    record = result.record
    answer = answer_of(record)
    if json_:
        results = [fit.model_dump(mode="json") for fit in record.results]
        print_json(result_json(answer, result.run_dir, results, record.timings))
        return
    print_answer(answer)
    console.print(f"results in {result.run_dir}; MLflow run [bold]{result.run_id}[/]")
    show_run_address(result.run_id)
