"""``steer-eval panel``: Phase 5 Part C, the judge panel (run when human r < 0.5).

The work is done in :mod:`experiments.validation.panel`; this command parses options
and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.table import Table

from experiments.answer import number
from experiments.cli.common import (
    DEFAULT_CONFIG,
    JsonOpt,
    console,
    friendly,
    out,
    print_json,
    progress_bars,
    require_extra,
    show_run_address,
)
from experiments.cli.human import ConfigOpt, ExperimentOpt, RunOpt, experiment_for
from experiments.validation.panel import DEFAULT_JUDGES, When

if TYPE_CHECKING:
    from experiments.validation.axbench import AxbenchOutcome
    from experiments.validation.panel import Decision, PanelOutcome
    from judges.estimate import PanelEstimate


# The provider whose judges run here on llama.cpp (judges/llama.py): the judge extra.
LLAMA_PROVIDER = "llama"


def register(app: typer.Typer) -> None:
    app.command("panel")(friendly(panel))


def panel(
    run: RunOpt = "latest",
    when: Annotated[
        When, typer.Option(help="auto: only when human r < the run's human_r_panel; always")
    ] = When.AUTO,
    judge: Annotated[
        list[str] | None,
        typer.Option(
            help="repeatable: anthropic/<model>, openai/<model>, llama/<path.gguf|embedded>"
        ),
    ] = None,
    budget: Annotated[float, typer.Option(help="USD cap for the API judges together")] = 5.0,
    limit: Annotated[
        int | None, typer.Option(min=1, help="rate only the first N generations (by key)")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(help="count the calls and their worst-case cost (price table); send nothing"),
    ] = False,
    rubric: Annotated[
        Literal["relatedness", "axbench"],
        typer.Option(
            help="relatedness: 0-10 (criterion 4); axbench: AxBench's concept, instruction "
            "and fluency scores (0-2, harmonic mean) per concept and sign"
        ),
    ] = "relatedness",
    openai_base_url: Annotated[
        str | None, typer.Option(help="an OpenAI-compatible server (vLLM, llama.cpp, Ollama)")
    ] = None,
    results_dir: Annotated[Path | None, typer.Option(help="local results folder")] = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    experiment: ExperimentOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Part C: rate every generation with a judge panel when human r < 0.5."""
    from experiments.validation.panel import run_panel_for

    judges = list(judge or DEFAULT_JUDGES)
    for name in judges:  # a local judge's extra, before anything is read or planned
        if name.split("/", 1)[0] == LLAMA_PROVIDER:
            given = "" if judge else " (a default judge)"
            require_extra(
                "llama_cpp", f"panel's local judge {name}{given}", "name other judges by --judge"
            )
    experiment = experiment_for(run, config, experiment)
    if rubric == "axbench":
        when = When.ALWAYS  # AxBench scores are wanted whatever the human correlation
    if dry_run:
        from experiments.validation.panel import estimate_panel_for

        decision, estimate = estimate_panel_for(
            run,
            when,
            judges,
            openai_base_url,
            results_dir,
            experiment=experiment,
            limit=limit,
            rubric=rubric,
        )
        _print_dry_run(decision, estimate, budget, json_)
        return
    if rubric == "axbench":
        from experiments.validation.axbench import run_axbench_for

        with progress_bars() as report:
            outcome = run_axbench_for(
                run,
                judges,
                budget,
                openai_base_url,
                results_dir,
                progress=lambda done, total: report("judging", done, total),
                experiment=experiment,
                limit=limit,
            )
        _print_axbench(outcome, json_)
        return
    with progress_bars() as report:
        rated = run_panel_for(
            run,
            when,
            judges,
            budget,
            openai_base_url,
            results_dir,
            progress=lambda done, total: report("judging", done, total),
            experiment=experiment,
            limit=limit,
        )
    _print_panel(rated, json_)
    if rated.result is not None and rated.combined is not None and not json_:
        from experiments.validation.runs import phase5_parent

        show_run_address(phase5_parent(run, experiment, results_dir).run_id)


def _print_panel(outcome: PanelOutcome, json_: bool) -> None:
    """What a panel run found: its decision, each judge's correlations, criterion 4."""
    decision, result, combined, skipped = outcome
    console.print(f"panel {'runs' if decision.run else 'skipped'}: {decision.reason}")
    if result is None or combined is None:
        if json_:
            print_json({"ran": False, "reason": decision.reason, "human_r": decision.human_r})
        return
    for name, reason in skipped.items():
        console.print(f"[yellow]skipped[/] {name}: {reason}")
    metrics = result.to_metrics()
    if json_:
        print_json(
            {
                "ran": True,
                "reason": decision.reason,
                "judges": result.judges,
                "skipped": skipped,
                "metrics": metrics,
                "not_evaluable": result.not_evaluable(),
                "criterion": combined.to_dict(),
                "wall_time_s": result.wall_time_s,
            }
        )
        return
    table = Table("judge", "r vs Δ", "r vs human", title="judge panel")
    for name in result.judges:
        rd, rh = result.judge_vs_delta.get(name), result.judge_vs_human.get(name)
        table.add_row(
            name,
            f"{rd.r:.3f}" if rd is not None and rd.evaluable else "n/a",
            f"{rh.r:.3f}" if rh is not None and rh.evaluable else "n/a",
        )
    out.print(table)
    console.print(
        f"Krippendorff α: {metrics.get('panel_alpha', 'n/a')}; "
        f"panel mean r vs Δ: {metrics.get('panel_mean_r_delta', 'n/a')}; "
        f"cost ${result.totals.get('cost_usd', 0):.4f}; "
        f"cache hits {int(result.totals.get('cache_hits', 0))}; "
        f"{result.wall_time_s:.1f} s"
    )
    console.print(f"criterion 4: [bold]{combined.status}[/] ({combined.reason})")


def _print_axbench(outcome: AxbenchOutcome, as_json: bool) -> None:
    """The axbench scores per concept and sign, beside Δ, the likelihood outcome and the
    unsteered twins' scores; then how the judges agree; for an identify run, the rubric's
    reliability among good directions and its agreement with the other outcomes."""
    from experiments.validation.axbench import agreement

    result, table, skipped, validity = outcome
    if as_json:
        print_json(
            {
                "ran": True,
                "rubric": "axbench",
                "judges": result.judges,
                "skipped": skipped,
                "per_concept": table.to_dict("records"),
                "agreement": agreement(result),
                "totals": result.totals,
                "identify_validity": validity.stored() if validity is not None else None,
            }
        )
        return
    for name, reason in skipped.items():
        console.print(f"[yellow]skipped[/] {name}: {reason}")
    grid = Table("concept", "sign", "n", "Δ effect", "likelihood", title="axbench scores (0-2)")
    for judge in result.judges:
        grid.add_column(f"{judge}\nconcept/instr/fluency")
        grid.add_column(f"{judge}\nHM (twin)")
    for row in table.to_dict("records"):
        cells = [row["concept"], row["sign"], str(row["n_texts"])]
        cells += [number(row["delta_effect"]), number(row["likelihood"])]
        for judge in result.judges:
            axes = [row.get(f"{judge}:{a}") for a in ("concept", "instruction", "fluency")]
            cells.append("/".join(number(v, ".2f") for v in axes))
            hm, twin = row.get(f"{judge}:hm"), row.get(f"{judge}:hm_twin")
            cells.append(f"{number(hm, '.2f')} ({number(twin, '.2f')})")
        grid.add_row(*cells)
    out.print(grid)
    agree = agreement(result)
    console.print(
        "agreement on the harmonic mean: "
        + "; ".join(f"{k} {'n/a' if v is None else f'{v:.3f}'}" for k, v in agree.items())
        + f"; cost ${result.totals.get('cost_usd', 0):.4f}; {result.wall_time_s:.1f} s"
    )
    if validity is not None:
        from experiments.identify.estimation.rubric import validity_lines

        for line in validity_lines(validity):
            out.print(line, markup=False, highlight=False)


def _print_dry_run(
    decision: Decision, estimate: PanelEstimate | None, budget: float, as_json: bool
) -> None:
    """What the panel would do: calls per judge and the worst case in USD; nothing sent.

    An API judge whose key is not set is priced all the same, with a line naming the
    variable to set (and ``missing_keys`` in ``--json``); a real run skips it until then.
    """
    if estimate is None:
        if as_json:
            print_json({"dry_run": True, "would_run": False, "reason": decision.reason})
        else:
            console.print(f"the panel would be skipped: {decision.reason}")
        return
    if as_json:
        print_json(
            {
                "dry_run": True,
                "would_run": True,
                "reason": decision.reason,
                **estimate.to_dict(),
                "budget_usd": budget,
                "fits_budget": estimate.fits(budget),
            }
        )
        return

    def usd(value: float | None) -> str:
        return "unknown" if value is None else f"${value:.4f}"

    table = Table(
        "judge", "ratings", "cached", "calls", "worst-case cost", "price", title="panel dry run"
    )
    for j in estimate.judges:
        table.add_row(
            j.judge,
            str(j.requests),
            "?" if j.cached is None else str(j.cached),
            str(j.calls),
            usd(j.cost_usd_max),
            j.price_source if j.missing_key is None else f"{j.price_source}; no key",
        )
    total = usd(estimate.cost_usd_max)
    table.add_row("[bold]total", "", "", f"[bold]{estimate.calls}", f"[bold]{total}", "")
    out.print(table)
    for name, variable in estimate.missing_keys.items():
        console.print(
            f"[yellow]no key[/] {name}: ${variable} is not set; its cost above is what it "
            "would cost once the key is set (a real run skips it until then)"
        )
    for name, reason in estimate.skipped.items():
        console.print(f"[yellow]would skip[/] {name}: {reason}")
    fits = estimate.fits(budget)
    verdict = {True: "fits", False: "exceeds", None: "cannot be checked against"}[fits]
    console.print(
        f"{estimate.samples} generations; the worst case {verdict} the ${budget:.2f} budget; "
        "nothing was sent"
    )
