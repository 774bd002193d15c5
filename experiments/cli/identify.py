"""``steer-eval identify``: Phase 6 that identifies (detection varied on its own).

Four commands: ``run`` (a development run, a held-out shard, a resumed run, a dry run),
``simulate`` (the design on toy studies), ``pool`` (the primary on the finished held-out
shards, then ``--exploratory``) and ``compare`` (v1's and v2's estimators on a run). The
flag forms they replace still work (``identify_group.IdentifyGroup``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer
from pydantic import BaseModel
from rich.table import Table

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
    refuse,
    resolve_config,
    resolve_run,
    say_stage,
    setup_logging,
    show_run_address,
    with_overrides,
)
from experiments.cli.identify_group import IdentifyGroup

if TYPE_CHECKING:
    from collections.abc import Callable

    from experiments.config import IdentifyStudyConfig
    from experiments.identify.study import IdentifyResult
    from experiments.kernel.estimate import Plan
    from experiments.record.pooled import Components

DEFAULT_CONFIG = Path("configs/identify.yaml")
R = TypeVar("R", bound=BaseModel)  # a pooled command's record


def register(app: typer.Typer) -> None:
    identify = typer.Typer(
        help="Phase 6 that identifies: vary detection quality on its own; what does it do "
        "to steering?\n\nThe flag forms these commands replace (identify --heldout, "
        "--simulate, --pool, --compare <folder>) still work and print the new form.",
    )
    identify.command("run")(friendly(run))
    identify.command("simulate")(friendly(simulate))
    identify.command("pool")(friendly(pool))
    identify.command("compare")(friendly(compare))
    app.add_typer(identify, name="identify", cls=IdentifyGroup)


# ------------------------------------------------------------------------ the commands
def run(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    concepts: Annotated[
        int | None, typer.Option("--concepts", help="only the first N concepts of the set")
    ] = None,
    quick: Annotated[
        bool, typer.Option(help="a 4-concept smoke version: configs/quick/identify.yaml")
    ] = False,
    heldout: Annotated[
        bool, typer.Option(help="score the held-out concepts (once per committed pre-registration)")
    ] = False,
    shard: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="with --heldout: run shard K of the held-out set (identify.shard_size "
            "concepts from K·size, in the split's order), one complete run",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            help="with --heldout: score them again (recorded as forced, not confirmatory)"
        ),
    ] = False,
    resume: Annotated[
        str | None, typer.Option(help="finish an interrupted run by id, or latest")
    ] = None,
    phase6_run: Annotated[
        str | None, typer.Option(help="a Phase 6 run (id or folder) to re-analyse as well")
    ] = None,
    dry_run: StudyDryRunOpt = False,
    budget_minutes: Annotated[
        float,
        typer.Option(min=1, help="with --dry-run: the shard size that fits this many minutes"),
    ] = 150.0,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Run the study: on development concepts, a held-out shard, or resumed.

    A development run by default; once pre-registered, a held-out shard (--heldout --shard
    K, once); an interrupted run finished (--resume); its plan and cost (--dry-run)."""
    setup_logging(verbose)
    from experiments.identify.heldout.prereg import PreregistrationError
    from experiments.identify.study import PHASE, run_identify

    if shard is not None and (not heldout or resume is not None):
        refuse(
            "--shard K runs shard K of the held-out set: give it with --heldout, not with "
            "--resume (a shard resumes by its run id)"
        )
    given = [
        flag
        for flag, value in (
            ("--set", set_), ("--model", model), ("--concepts", concepts), ("--quick", quick)
        )
        if value
    ]  # fmt: skip
    if heldout and resume is None and given:
        refuse(
            f"--heldout scores the pre-registered study as committed: drop {', '.join(given)} "
            "(change the config and pre-register again instead)"
        )
    overrides = with_overrides(
        set_,
        ("identify.limit", concepts),
        ("identify.concept_set", "heldout" if heldout else None),
        ("identify.shard", shard),
        ("identify.phase6_run", phase6_run),
    )
    cfg = _config(config, overrides, model, quick)
    if dry_run:
        _dry_run(cfg, budget_minutes, json_)
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
        refuse(str(exc))
    _show_run(result, json_)


def simulate(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    toys: Annotated[int, typer.Option(min=2, help="toys per confound class and arm")] = 30,
    components: Annotated[
        Path | None,
        typer.Option(
            help="take the toys' noise (within-cell sd, the concepts' slope spread, AUROC's "
            "spread in a cell) from this identify run folder or directions.csv, or the "
            "'measured' block of a design or power JSON written earlier "
            "(bench/identify_power_v3.json), instead of the assumed values",
            metavar="<folder>",
        ),
    ] = None,
    power_at: Annotated[
        str | None,
        typer.Option(
            help="also the primary's power at the smallest effect of interest for these "
            "numbers of concepts (comma-separated, e.g. 25,50,100,200)",
            metavar="<n,n,...>",
        ),
    ] = None,
    primary_only: Annotated[
        bool,
        typer.Option(
            help="score the pre-registered primary alone (what the gate reads), for a large "
            "confirmatory grid"
        ),
    ] = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Check the configured design on toy studies with known answers (no model compute).

    Bias, coverage and power per estimand and confound class, printed and written to the
    config's results folder; the design gate's failures named."""
    setup_logging(verbose)
    cfg = _config(config, set_, model)
    try:
        sizes = [int(x) for x in (power_at or "").split(",") if x.strip()]
    except ValueError:
        refuse(
            f"--power-at takes whole numbers of concepts separated by commas, e.g. "
            f"25,50,100; got {power_at!r}"
        )
    _simulate(cfg, toys, json_, components, sizes, primary_only)


def pool(
    config: ConfigOpt = DEFAULT_CONFIG,
    exploratory: Annotated[
        bool,
        typer.Option(
            help="after the pooled primary is scored: every other estimand and the per-concept "
            "table on the same shards (exploratory; scores nothing)",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(help="score the pooled primary again (recorded as forced, not confirmatory)"),
    ] = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Score the pre-registered primary once on the finished held-out shards.

    Reads every shard's committed folder (identify.shards_dir) and writes the pooled answer
    beside them; then --exploratory: every other estimand on the same shards."""
    setup_logging(verbose)
    cfg = _config(config, ["identify.concept_set=heldout"])
    if exploratory:  # every estimand on the pooled shards, after the primary
        from experiments.identify.pooled_exploratory import EXPLORATORY_RECORD, exploratory_markdown
        from experiments.identify.study import pool_exploratory

        _pooled(
            cfg, json_, "the exploratory estimands on the pooled shards (bootstrap)",
            lambda: pool_exploratory(cfg), exploratory_markdown, EXPLORATORY_RECORD,
        )  # fmt: skip
    else:  # the primary on the pooled held-out shards (identify/heldout/shards.py)
        from experiments.identify.heldout.shards import POOLED_ANSWER, pooled_markdown
        from experiments.identify.study import pool_heldout

        _pooled(
            cfg, json_, "pooling the held-out shards (wild cluster bootstrap)",
            lambda: pool_heldout(cfg, force), pooled_markdown, POOLED_ANSWER,
        )  # fmt: skip


def compare(
    folder: Annotated[Path, typer.Argument(help="a run folder, or its directions.csv")],
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Re-analyse a run with v1's and v2's estimators side by side."""
    setup_logging(verbose)
    from experiments.identify.estimation.compare import before_after, markdown, read_directions

    try:
        frame = read_directions(folder)
    except FileNotFoundError as exc:
        refuse(str(exc))
    with console.status("re-analysing (wild cluster bootstrap)"):
        comparison = before_after(frame)
    if json_:
        print_json(comparison.model_dump(mode="json"))
    else:
        console.print(markdown(comparison), highlight=False, markup=False)


# ------------------------------------------------------------------------- their parts
def _config(
    config: Path, overrides: list[str] | None, model: str | None = None, quick: bool = False
) -> IdentifyStudyConfig:
    """The ``--config`` file (with ``--quick``'s overlay) and the overrides; load_config
    refuses a config of another phase."""
    from experiments.identify import QUICK

    overlays = [QUICK] if quick else []
    found = resolve_config(config, overrides, model, None, None, "identify", overlays)
    return cast("IdentifyStudyConfig", found)


def _dry_run(cfg: IdentifyStudyConfig, budget_minutes: float, json_: bool) -> None:
    """``run --dry-run``: the plan, the strength range's note and the cost per concept."""
    from experiments.cli.plan import print_study_plan
    from experiments.identify.study import PHASE, STAGES, range_note

    def strength(plan: Plan, _layers: list[int]) -> list[str]:
        note = range_note(cfg, plan.model.probe_id, plan.layer)
        return [note] if note else []

    def costs(plan: Plan) -> tuple[list[str], dict[str, Any]]:
        from experiments.identify.heldout.cost import cost_lines, plan_costs
        from experiments.identify.stages.manipulations import direction_grid

        found, why = plan_costs(plan, directions=len(direction_grid(cfg.identify)))
        extra = found.to_dict(budget_minutes) if found else {"note": why}
        return cost_lines(found, why, budget_minutes), {"stage_costs": extra}

    print_study_plan(cfg, PHASE, STAGES, json_, strength=strength, costs=costs)


def _show_run(result: IdentifyResult, json_: bool) -> None:
    """A finished run: its answer (or ``--json``), folder and MLflow run."""
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


def _pooled(
    cfg: IdentifyStudyConfig,
    json_: bool,
    status: str,
    compute: Callable[[], R],
    markdown: Callable[[R], str],
    written: str,
) -> None:
    """Run a pooled-shards command: its refusal as an error (exit 2), its record as JSON
    or as markdown with the file it wrote in the pooled folder."""
    from experiments.identify.heldout.prereg import POOLED, PreregistrationError
    from experiments.identify.heldout.shards import shards_root

    try:
        with console.status(status):
            record = compute()
    except PreregistrationError as exc:
        refuse(str(exc))
    if json_:
        print_json(record.model_dump(mode="json", exclude_unset=True))
        return
    console.print(markdown(record), highlight=False, markup=False)
    console.print(
        f"written: {shards_root(cfg) / POOLED / written} (commit the folder)", highlight=False
    )


def _measured_components(cfg: IdentifyStudyConfig, run: Path) -> Components:
    """``--components``: the noise a simulation draws from, measured on a run folder's
    directions table or read from a components JSON (exit 2 with the reason if neither)."""
    from experiments.identify.estimation.compare import read_directions
    from experiments.identify.estimation.variance import components, components_from_json
    from experiments.identify.simulation.design import population_of, primary_of

    try:
        if run.suffix == ".json":
            return components_from_json(run)
        return components(read_directions(run), population=population_of(primary_of(cfg)))
    except (FileNotFoundError, ValueError) as exc:
        refuse(f"--components: {exc}")


def _simulate(
    cfg: IdentifyStudyConfig, toys: int, json_: bool, run: Path | None = None,
    sizes: list[int] | None = None, primary_only: bool = False,
) -> None:  # fmt: skip
    """``--simulate``: the design table (``identify/simulation/design.py``), printed and written."""
    from experiments.identify.simulation.design import run_design, write_design

    measured = _measured_components(cfg, run) if run is not None else None
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
