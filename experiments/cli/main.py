"""The core commands: assets, concepts, classifiers (Phase 4) and run (Phase 5 Part A)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from experiments.cli.common import (
    DEFAULT_CONFIG,
    ConceptsOpt,
    ConfigOpt,
    LayerOpt,
    ModelOpt,
    SetOpt,
    VerboseOpt,
    console,
    friendly,
    resolve_config,
    setup_logging,
)


def register(app: typer.Typer) -> None:
    """Add the core commands to ``app``."""
    for command in (assets, concepts, classifiers, run, rescore):
        app.command()(friendly(command))


def assets(
    no_wordnet: Annotated[
        bool, typer.Option(help="skip WordNet (only needed to rebuild concepts)")
    ] = False,
) -> None:
    """Prepare and verify the embedded offline assets (model, embedder, WordNet)."""
    from steering.assets import cache_dir, prepare_all

    console.print(f"cache folder: {cache_dir()}")
    table = Table("asset", "path", "check")
    for report in prepare_all(with_wordnet=not no_wordnet):
        table.add_row(report.name, report.path, f"[green]ok[/] {report.check}")
    console.print(table)


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
    graph = build_concept_graph(
        ids, top_n=top, seed=seed, n_negatives=negatives, min_distance=min_distance
    )
    graph.save(out)
    console.print(
        f"wrote {len(graph.concepts)} concepts to {out}: "
        + ", ".join(c.synset for c in graph.concepts)
    )


def classifiers(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    layer: LayerOpt = None,
    concepts: ConceptsOpt = None,
    train: Annotated[str | None, typer.Option(help="PxNxU training prompts, e.g. 5x5x5")] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Phase 4: train and evaluate one linear probe per concept (always retrains)."""
    setup_logging(verbose)
    from experiments.concepts import load_concepts
    from experiments.pipeline.probes import train_classifiers
    from steering.models import load_model

    overrides = list(set_ or []) + ([f"classifier.train={train}"] if train else [])
    cfg = resolve_config(config, overrides, model, layer, concepts)
    graph = load_concepts(cfg.concepts.file, limit=cfg.concepts.limit, synsets=cfg.concepts.synsets)
    with console.status(f"loading {cfg.model}"):
        lm = load_model(cfg.model, device=cfg.device, dtype=cfg.dtype)
    chosen = lm.check_layer(cfg.layer if cfg.layer is not None else lm.default_layer)
    with console.status(f"training {len(graph.concepts)} probes at layer {chosen}"):
        result = train_classifiers(cfg, lm, graph, chosen, concept_file=cfg.concepts.file)
    table = Table("concept", "F1", "precision", "recall", "AUROC", title="held-out metrics")
    for synset, probe in result.probes.items():
        m = probe.metrics
        table.add_row(
            synset,
            f"{m['f1']:.3f}",
            f"{m['precision']:.3f}",
            f"{m['recall']:.3f}",
            "n/a" if m["auroc"] is None else f"{m['auroc']:.3f}",
        )
    mean_f1 = sum(result.f1().values()) / len(result.probes)
    table.add_row("[bold]mean", f"[bold]{mean_f1:.3f}", "", "", "")
    console.print(table)
    console.print(
        f"saved to {result.directory} in {result.seconds:.1f} s; MLflow run {result.run_id}"
    )


def run(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    layer: LayerOpt = None,
    concepts: ConceptsOpt = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="tokens to generate per row")] = None,
    resume: Annotated[str | None, typer.Option(help="finish an interrupted run by its id")] = None,
    results_dir: Annotated[
        Path | None,
        typer.Option(help="with --resume: the results folder, if the run's own tag is stale"),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(help="where rows are generated: local (default) or ray; also with --resume"),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="ray: actors, one model each")] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(help="ray: join this cluster (default: $RAY_ADDRESS, else start one here)"),
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Phase 5 Part A: steer, generate, score Δ, judge the success criteria, log to MLflow."""
    import os

    setup_logging(verbose)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from experiments.pipeline.run import run_phase5

    overrides = list(set_ or [])
    if max_new_tokens is not None:
        overrides.append(f"generation.max_new_tokens={max_new_tokens}")
    execution = {k: v for k, v in (("executor", executor), ("workers", workers)) if v is not None}
    if ray_address:
        os.environ["RAY_ADDRESS"] = ray_address
    cfg = None if resume else resolve_config(config, overrides, model, layer, concepts)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("generations", total=None)
        tokens = progress.add_task("tokens (current batch)", total=None, visible=False)

        def on_batch(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        def on_step(step: int, steps: int) -> None:
            progress.update(tokens, completed=step + 1, total=steps, visible=True)

        result = run_phase5(
            cfg,
            resume=resume,
            on_batch=on_batch,
            on_step=on_step,
            progress=lambda msg: progress.console.print(f"[dim]{msg}"),
            results_dir=results_dir,
            execution=execution or None,
        )
    _print_result(result)


def rescore(
    run_id: Annotated[str, typer.Argument(help="a finished Phase 5 run id")],
    results_dir: Annotated[
        Path | None, typer.Option(help="the results folder (default: the run's own)")
    ] = None,
    verbose: VerboseOpt = False,
) -> None:
    """Recompute every score, criterion and log of a run from its saved texts (no model)."""
    import time

    setup_logging(verbose)
    from experiments.pipeline.run import rescore as rescore_run

    start = time.perf_counter()
    with console.status(f"rescoring {run_id}"):
        result = rescore_run(run_id, results_dir=results_dir)
    _print_result(result)
    console.print(f"rescored in {time.perf_counter() - start:.1f} s")


def _print_result(result) -> None:
    table = Table(
        "strength",
        "mean Δ",
        "mean |Δs−Δ0|",
        "direction acc.",
        "near-empty",
        "distinct-2",
        title="Phase 5: per strength",
    )

    def fmt(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    for s, v in sorted(result.per_strength.items()):
        table.add_row(
            f"{s:+g}",
            fmt(v["delta_mean"]),
            fmt(v["magnitude_mean"]),
            fmt(v["direction_accuracy"]),
            fmt(v["near_empty_fraction"]),
            fmt(v["distinct_2_mean"]),
        )
    console.print(table)
    crit = Table("criterion", "status", "value", "threshold", title="success criteria")
    colours = {"pass": "green", "fail": "red"}
    for c in result.criteria.values():
        colour = colours.get(c.status, "yellow")
        crit.add_row(c.key, f"[{colour}]{c.status}[/]", fmt(c.value), str(c.threshold))
    console.print(crit)
    console.print(
        f"{result.tokens_per_second:.1f} generated tokens/s; results in "
        f"{result.results_dir}; MLflow parent run [bold]{result.run_id}[/]"
    )
