"""``steer-eval bench``: the options, a progress line per step, and the results as tables.

The measuring lives in :mod:`experiments.bench`, imported only inside the command, so
``steer-eval --help`` does not import torch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from experiments.bench.core.options import (
    DEFAULT_CONFIG,
    DEFAULT_OUT,
    SECTIONS,
    BenchOptions,
    parse_rows,
    parse_sections,
)
from experiments.cli.common import ConfigOpt, SetOpt, VerboseOpt, console, friendly, setup_logging

VERDICT_STYLE = {"yes": "[green]yes[/]", "no": "[red]no[/]"}


def register(app: typer.Typer) -> None:
    app.command("bench")(friendly(bench))


def bench(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    repeats: Annotated[
        int | None, typer.Option(help="repeats of the cheap timings (default 3; quick 1)")
    ] = None,
    e2e_repeats: Annotated[int, typer.Option(help="repeats of the end-to-end run")] = 1,
    per_sample_limit: Annotated[
        int | None,
        typer.Option(help="time the per-sample loop on N samples and extrapolate (15)"),
    ] = None,
    llama_limit: Annotated[
        int | None, typer.Option(help="samples for the llama.cpp single-stream timing (30)")
    ] = None,
    quick: Annotated[bool, typer.Option(help="shrink everything: a smoke test")] = False,
    device: Annotated[str | None, typer.Option(help="cpu, cuda, cuda:N (default: config)")] = None,
    dtype: Annotated[str | None, typer.Option(help="float32, bfloat16 (default: config)")] = None,
    threads: Annotated[int | None, typer.Option(help="torch.set_num_threads")] = None,
    only: Annotated[
        str | None, typer.Option(help=f"comma-separated sections: {', '.join(SECTIONS)}")
    ] = None,
    skip: Annotated[str | None, typer.Option(help="comma-separated sections to skip")] = None,
    out: Annotated[Path, typer.Option(help="results file")] = DEFAULT_OUT,
    gpu_rows: Annotated[
        str | None, typer.Option(help="section gpu: batch sizes, e.g. 256,1024 (the default)")
    ] = None,
    gpu_tokens: Annotated[
        int | None, typer.Option(help="section gpu: new tokens per row (50)")
    ] = None,
    gpu_model: Annotated[
        str | None,
        typer.Option(help="section gpu: a model config for random weights (gemma-3-4b-pt)"),
    ] = None,
    gpu_compiled: Annotated[
        bool,
        typer.Option(help="section gpu: also time HF generate with a static compiled cache"),
    ] = True,
    verbose: VerboseOpt = False,
) -> None:
    """Speed and memory of the Phase 5 workload, measured side by side (bench/results.json)."""
    setup_logging(verbose)
    from experiments.bench.runner import run_bench

    kwargs: dict[str, Any] = {
        "config": config,
        "overrides": list(set_ or []),
        "out": out,
        "sections": sections_option(only, skip),
        "e2e_repeats": e2e_repeats,
        "device": device,
        "dtype": dtype,
        "threads": threads,
        "gpu_compiled": gpu_compiled,
    }
    if gpu_rows is not None:
        try:
            kwargs["gpu_rows"] = parse_rows(gpu_rows)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--gpu-rows") from None
    for key, value in (
        ("repeats", repeats),
        ("per_sample_limit", per_sample_limit),
        ("llama_limit", llama_limit),
        ("gpu_tokens", gpu_tokens),
        ("gpu_model", gpu_model),
    ):
        if value is not None:
            kwargs[key] = value
    opts = BenchOptions.quick_defaults(**kwargs) if quick else BenchOptions(**kwargs)
    start = time.perf_counter()

    def say(message: str) -> None:
        console.print(f"[dim]{time.perf_counter() - start:7.1f}s[/] {message}")

    results = run_bench(opts, say=say)
    for table in render_tables(results):
        console.print(table)
    console.print(f"wrote {out} in {results['total_seconds']:.0f} s")


def sections_option(only: str | None, skip: str | None) -> tuple[str, ...]:
    """``--only``/``--skip`` as sections; an unknown name is a usage error (exit 2)."""
    try:
        return parse_sections(only, skip)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def render_tables(results: dict[str, Any]) -> list[Table]:
    """The report's plain tables as rich tables, verdicts in colour."""
    from experiments.bench.reporting.gpu_report import gpu_tables
    from experiments.bench.reporting.report import report_tables

    rendered = []
    for plain in [*report_tables(results), *gpu_tables(results)]:
        table = Table(*plain.columns, title=plain.title)
        for row in plain.rows:
            cells = list(row)
            if plain.verdict_column is not None:
                v = cells[plain.verdict_column]
                cells[plain.verdict_column] = VERDICT_STYLE.get(v, v)
            table.add_row(*cells)
        rendered.append(table)
    return rendered
