"""``steer-eval panel``: Phase 5 Part C, the judge panel (run when human r < 0.5).

The work is done in :mod:`experiments.validation.panel`; this command parses options
and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from experiments.cli.common import DEFAULT_CONFIG, console, friendly
from experiments.cli.human import ConfigOpt, ExperimentOpt, experiment_for
from experiments.validation.panel import DEFAULT_JUDGES, When


def register(app: typer.Typer) -> None:
    """Add the ``panel`` command to ``app``."""
    app.command("panel")(friendly(panel))


def panel(
    run: Annotated[str, typer.Option(help="the Phase 5 parent run id, or latest")] = "latest",
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
    openai_base_url: Annotated[
        str | None, typer.Option(help="an OpenAI-compatible server (vLLM, llama.cpp, Ollama)")
    ] = None,
    results_dir: Annotated[Path | None, typer.Option(help="local results folder")] = None,
    config: ConfigOpt = DEFAULT_CONFIG,
    experiment: ExperimentOpt = None,
) -> None:
    """Part C: rate every generation with a judge panel when human r < 0.5."""
    from rich.table import Table

    from experiments.validation.panel import run_panel_for

    decision, result, combined, skipped = run_panel_for(
        run,
        when,
        list(judge or DEFAULT_JUDGES),
        budget,
        openai_base_url,
        results_dir,
        experiment=experiment_for(run, config, experiment),
    )
    console.print(f"panel {'runs' if decision.run else 'skipped'}: {decision.reason}")
    if result is None or combined is None:
        return
    for name, reason in skipped.items():
        console.print(f"[yellow]skipped[/] {name}: {reason}")
    table = Table("judge", "r vs Δ", "r vs human", title="judge panel")
    for name in result.judges:
        rd, rh = result.judge_vs_delta.get(name), result.judge_vs_human.get(name)
        table.add_row(
            name,
            f"{rd.r:.3f}" if rd is not None and rd.evaluable else "n/a",
            f"{rh.r:.3f}" if rh is not None and rh.evaluable else "n/a",
        )
    console.print(table)
    metrics = result.to_metrics()
    console.print(
        f"Krippendorff α: {metrics.get('panel_alpha', 'n/a')}; "
        f"panel mean r vs Δ: {metrics.get('panel_mean_r_delta', 'n/a')}; "
        f"cost ${result.totals.get('cost_usd', 0):.4f}; "
        f"cache hits {int(result.totals.get('cache_hits', 0))}; "
        f"{result.wall_time_s:.1f} s"
    )
    console.print(f"criterion 4: [bold]{combined.status}[/] ({combined.reason})")
