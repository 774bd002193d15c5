"""``steer-eval identify``: Phase 6 that identifies (detection varied on its own)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from experiments.cli.answer import print_answer, result_json
from experiments.cli.common import (
    ConfigOpt,
    JsonOpt,
    ModelOpt,
    SetOpt,
    StudyDryRunOpt,
    VerboseOpt,
    console,
    friendly,
    print_json,
    resolve_config,
    resolve_run,
    say_stage,
    setup_logging,
    show_run_address,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from experiments.config import IdentifyStudyConfig
    from experiments.kernel.estimate import Plan


def register(app: typer.Typer) -> None:
    app.command()(friendly(identify))


def identify(
    config: ConfigOpt = Path("configs/identify.yaml"),
    set_: SetOpt = None,
    model: ModelOpt = None,
    concepts: Annotated[
        int | None, typer.Option("--concepts", help="only the first N concepts of the set")
    ] = None,
    heldout: Annotated[
        bool,
        typer.Option(help="score the held-out concepts (once per committed pre-registration)"),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            help="with --heldout: score them again (recorded as forced, not confirmatory)"
        ),
    ] = False,
    shard: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="with --heldout: run shard K of the held-out set (identify.shard_size "
            "concepts from K·size, in the split's order), one complete run",
        ),
    ] = None,
    pool: Annotated[
        bool,
        typer.Option(
            help="score the primary once on every finished held-out shard (their committed "
            "folders, identify.shards_dir), and stop",
        ),
    ] = False,
    exploratory: Annotated[
        bool,
        typer.Option(
            help="with --pool, after the pooled primary is scored: every other estimand and "
            "the per-concept table on the same shards (exploratory; scores nothing)",
        ),
    ] = False,
    budget_minutes: Annotated[
        float,
        typer.Option(min=1, help="with --dry-run: the shard size that fits this many minutes"),
    ] = 150.0,
    phase6_run: Annotated[
        str | None, typer.Option(help="a Phase 6 run (id or folder) to re-analyse as well")
    ] = None,
    quick: Annotated[
        bool,
        typer.Option(help="a 4-concept smoke version: configs/quick/identify.yaml"),
    ] = False,
    resume: Annotated[
        str | None, typer.Option(help="finish an interrupted run by id, or latest")
    ] = None,
    dry_run: StudyDryRunOpt = False,
    compare: Annotated[
        Path | None,
        typer.Option(
            help="re-analyse a run folder (or its directions.csv) with v1's and v2's "
            "estimators side by side, and stop",
            metavar="<folder>",
        ),
    ] = None,
    simulate: Annotated[
        bool,
        typer.Option(
            help="check the configured grid on toy studies with known answers (no model "
            "compute): bias, coverage, power per estimand and confound, and stop"
        ),
    ] = False,
    toys: Annotated[
        int, typer.Option(min=2, help="with --simulate: toys per confound class and arm")
    ] = 30,
    components: Annotated[
        Path | None,
        typer.Option(
            help="with --simulate: take the toys' noise (within-cell sd, the concepts' "
            "slope spread, AUROC's spread in a cell) from this identify run folder or "
            "directions.csv, or the 'measured' block of a design or power JSON written "
            "earlier (bench/identify_power_v3.json), instead of the assumed values",
            metavar="<folder>",
        ),
    ] = None,
    power_at: Annotated[
        str | None,
        typer.Option(
            help="with --simulate: also the primary's power at the smallest effect of "
            "interest for these numbers of concepts (comma-separated, e.g. 25,50,100,200)",
            metavar="<n,n,...>",
        ),
    ] = None,
    primary_only: Annotated[
        bool,
        typer.Option(
            help="with --simulate: score the pre-registered primary alone (what the gate "
            "reads), for a large confirmatory grid"
        ),
    ] = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Phase 6 that identifies: vary detection quality on its own; what does it do to steering?"""
    setup_logging(verbose)
    if simulate:
        cfg = cast(  # load_config refuses a config of another phase
            "IdentifyStudyConfig",
            resolve_config(config, list(set_ or []), model, None, None, "identify"),
        )
        try:
            sizes = [int(x) for x in (power_at or "").split(",") if x.strip()]
        except ValueError:
            console.print(
                f"[bold red]error:[/] --power-at takes whole numbers of concepts separated "
                f"by commas, e.g. 25,50,100; got {power_at!r}",
                highlight=False,
            )
            raise typer.Exit(2) from None
        _simulate(cfg, toys, json_, components, sizes, primary_only)
        return
    if compare is not None:
        from experiments.identify.compare import before_after, markdown, read_directions

        try:
            frame = read_directions(compare)
        except FileNotFoundError as exc:
            console.print(f"[bold red]error:[/] {exc}", highlight=False)
            raise typer.Exit(2) from None
        with console.status("re-analysing (wild cluster bootstrap)"):
            comparison = before_after(frame)
        if json_:
            print_json(comparison)
        else:
            console.print(markdown(comparison), highlight=False, markup=False)
        return
    from experiments.identify import QUICK
    from experiments.identify.prereg import PreregistrationError
    from experiments.identify.study import PHASE, run_identify

    if shard is not None and (not heldout or resume is not None or pool):
        console.print(
            "[bold red]error:[/] --shard K runs shard K of the held-out set: give it with "
            "--heldout, not with --resume (a shard resumes by its run id) or --pool",
            highlight=False,
        )
        raise typer.Exit(2)
    if pool:
        heldout = True
    if heldout and resume is None:
        given = [
            flag
            for flag, value in (
                ("--set", set_), ("--model", model), ("--concepts", concepts), ("--quick", quick)
            )
            if value
        ]  # fmt: skip
        if given:
            console.print(
                f"[bold red]error:[/] --heldout scores the pre-registered study as committed: "
                f"drop {', '.join(given)} (change the config and pre-register again instead)",
                highlight=False,
            )
            raise typer.Exit(2)
    overrides = list(set_ or [])
    if concepts is not None:
        overrides.append(f"identify.limit={concepts}")
    if heldout:
        overrides.append("identify.concept_set=heldout")
    if shard is not None:
        overrides.append(f"identify.shard={shard}")
    if phase6_run is not None:
        overrides.append(f"identify.phase6_run={phase6_run}")
    cfg = cast(  # load_config refuses a config of another phase
        "IdentifyStudyConfig",
        resolve_config(config, overrides, model, None, None, "identify", [QUICK] if quick else []),
    )
    if pool and exploratory:
        _pool_exploratory(cfg, json_)
        return
    if pool:
        _pool(cfg, force, json_)
        return
    if dry_run:
        from experiments.cli.plan import print_study_plan
        from experiments.identify.study import STAGES, range_note

        def strength(plan: Plan, _layers: list[int]) -> list[str]:
            note = range_note(cfg, plan.model.probe_id, plan.layer)
            return [note] if note else []

        def costs(plan: Plan) -> tuple[list[str], dict[str, Any]]:
            from experiments.identify.cost import cost_lines, plan_costs
            from experiments.identify.manipulations import direction_grid

            found, why = plan_costs(plan, directions=len(direction_grid(cfg.identify)))
            extra = found.to_dict(budget_minutes) if found else {"note": why}
            return cost_lines(found, why, budget_minutes), {"stage_costs": extra}

        print_study_plan(cfg, PHASE, STAGES, json_, strength=strength, costs=costs)
        return
    if resume is not None:
        resume = resolve_run(resume, cfg.experiment, PHASE, finished=False)
    try:
        start = time.monotonic()
        with console.status("Phase 6 identification") as status:
            result = run_identify(
                cfg,
                resume=resume,
                force=force,
                progress=lambda msg: say_stage(status, msg, start),
            )
    except PreregistrationError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    from experiments.identify.answer import answer_of

    record = result.record
    answer = answer_of(record)
    if json_:
        results = {
            "manipulations": {
                m: r.model_dump(mode="json", include={"slope_auroc", "partial", "n_cells"})
                for m, r in record.manipulations.items()
            },
            "pooled": record.pooled.model_dump(mode="json", include={"slope_auroc", "partial"}),
        }
        print_json(result_json(answer, result.run_dir, results, record.timings))
        return
    print_answer(answer)
    console.print(
        f"results in {result.run_dir} (answer.md, summary.md); MLflow run "
        f"[bold]{result.run_id}[/]; {record.timings.get('total', 0) / 60:.1f} min"
    )
    show_run_address(result.run_id)


def _pool(cfg: IdentifyStudyConfig, force: bool, json_: bool) -> None:
    """``--pool``: the primary on the pooled held-out shards (``identify/shards.py``)."""
    from experiments.identify.shards import POOLED_ANSWER, pooled_markdown
    from experiments.identify.study import pool_heldout

    _pooled(
        cfg, json_, "pooling the held-out shards (wild cluster bootstrap)",
        lambda: pool_heldout(cfg, force), pooled_markdown, POOLED_ANSWER,
    )  # fmt: skip


def _pool_exploratory(cfg: IdentifyStudyConfig, json_: bool) -> None:
    """``--pool --exploratory``: every estimand on the pooled shards, after the primary."""
    from experiments.identify.pooled_exploratory import EXPLORATORY_RECORD, exploratory_markdown
    from experiments.identify.study import pool_exploratory

    _pooled(
        cfg, json_, "the exploratory estimands on the pooled shards (bootstrap)",
        lambda: pool_exploratory(cfg), exploratory_markdown, EXPLORATORY_RECORD,
    )  # fmt: skip


def _pooled(
    cfg: IdentifyStudyConfig,
    json_: bool,
    status: str,
    compute: Callable[[], dict[str, Any]],
    markdown: Callable[[dict[str, Any]], str],
    written: str,
) -> None:
    """Run a pooled-shards command: its refusal as an error (exit 2), its record as JSON
    or as markdown with the file it wrote in the pooled folder."""
    from experiments.identify.prereg import POOLED, PreregistrationError
    from experiments.identify.shards import shards_root

    try:
        with console.status(status):
            record = compute()
    except PreregistrationError as exc:
        console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    if json_:
        print_json(record)
        return
    console.print(markdown(record), highlight=False, markup=False)
    console.print(
        f"written: {shards_root(cfg) / POOLED / written} (commit the folder)", highlight=False
    )


def _simulate(
    cfg: IdentifyStudyConfig, toys: int, json_: bool, run: Path | None = None,
    sizes: list[int] | None = None, primary_only: bool = False,
) -> None:  # fmt: skip
    """``--simulate``: the design table (``identify/design.py``), printed and written."""
    from rich.table import Table

    from experiments.identify.compare import read_directions
    from experiments.identify.design import population_of, primary_of, run_design, write_design
    from experiments.identify.variance import components, components_from_json

    measured = None
    if run is not None:
        try:
            measured = (
                components_from_json(run)
                if run.suffix == ".json"
                else components(read_directions(run), population=population_of(primary_of(cfg)))
            )
        except (FileNotFoundError, ValueError) as exc:
            console.print(f"[bold red]error:[/] --components: {exc}", highlight=False)
            raise typer.Exit(2) from None
    start = time.monotonic()
    with console.status("simulating") as status:
        shown = -1  # the last tenth printed

        def progress(what: str, done: int, total: int) -> None:
            nonlocal shown
            line = f"toy {done}/{total}: {what}, {time.monotonic() - start:.0f} s"
            status.update(line)
            tenth = 10 * done // max(total, 1)  # no terminal (a log): a line per 10%
            if not console.is_terminal and tenth > shown:
                shown = tenth
                print(line, file=sys.stderr, flush=True)

        result = run_design(
            cfg, toys=toys, progress=progress, measured=measured, sizes=sizes or [],
            primary_only=primary_only,
        )  # fmt: skip
    paths = write_design(result, cfg.identify.results_dir)
    if json_:
        print_json({**result, "files": list(paths)})
        return
    table = Table(title=f"{cfg.name}: {toys} toys per class and arm, seed {result['seed']}")
    columns = {
        "truth": "truth", "bias": "bias", "coverage": "covers truth",
        "supported_0": "supported", "no_practical_0": "no practical effect",
        "power": "power", "width": "width",
    }  # fmt: skip
    for col in ("estimand", "class", *columns.values(), "weights"):
        table.add_column(col)

    def cell(r: dict[str, Any], k: str) -> str:
        value = r.get(k)
        return (
            "—" if value is None else f"{value:+.3f}" if k in ("bias", "truth") else f"{value:.2f}"
        )

    for r in result["table"]:
        top = sorted(r["weights"].items(), key=lambda kv: -kv[1])[:3]
        table.add_row(
            r["estimand"], r["class"], *(cell(r, k) for k in columns),
            ", ".join(f"{m} {w:.2f}" for m, w in top),
        )  # fmt: skip
    if measured is not None:
        console.print(
            f"noise measured on {run}: {measured.n_concepts} concepts, within-cell sd "
            f"{measured.within_sd:.3f}, slope spread τ {measured.slope_sd:.3f}, AUROC sd in "
            f"a cell {measured.auroc_within_sd:.3f}",
            highlight=False,
        )
    console.print(table)
    for row in result.get("power_curve") or []:
        who = f"{row['primary']} in {row['class']}, " if row.get("primary") else ""  # co-primary
        console.print(
            f"{who}{row['n_concepts']} concepts: power {row['power']:.2f} at the smallest "
            f"effect of interest, 'no practical effect' with none "
            f"{row['no_practical_0'] or 0:.2f}, interval width {row['width']:.2f}",
            highlight=False,
        )
    powers = [  # co-primaries, read by Holm: the class each states its power in, then others
        (name, p) for name, stated in (result.get("power") or {}).items()
        for p in (stated, *stated["also"].values())
    ]  # fmt: skip
    for name, p in powers:
        reach = p["smallest_n_reaching"]
        console.print(
            f"{name} ({p['class']}, {p['n_concepts']} concepts, Holm at alpha "
            f"{result['alpha']}): 'supported' {p['supported_at_sesoi'] or 0:.2f} with the "
            f"smallest effect planted, 'no practical effect' "
            f"{p['no_practical_effect_at_0'] or 0:.2f} with none; on the curve >= "
            f"{reach['bound']} from {reach['no_practical_effect'] or 'no size'} concepts (no "
            f"practical effect), {reach['supported'] or 'no size'} (supported)",
            highlight=False,
        )
    for failure in result["failures"]:
        console.print(f"[bold red]gate:[/] {failure}", highlight=False)
    console.print(f"written: {paths[0]}, {paths[1]} ({time.monotonic() - start:.0f} s)")
