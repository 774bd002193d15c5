"""``steer-eval calibrate-strength``: a model's coherent range of β, and ``--layer auto``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from experiments.answer import number
from experiments.cli.common import (
    DEFAULT_CONFIG,
    ConfigOpt,
    JsonOpt,
    LayerAutoOpt,
    ModelOpt,
    SetOpt,
    VerboseOpt,
    console,
    friendly,
    out,
    parse_layer,
    print_json,
    progress_bars,
    resolve_config,
    setup_logging,
    show_run_address,
)

if TYPE_CHECKING:
    from experiments.strength_range import StrengthRange


def register(app: typer.Typer) -> None:
    app.command("calibrate-strength")(friendly(calibrate_strength))


def calibrate_strength(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    layer: LayerAutoOpt = None,
    concepts: Annotated[
        int,
        typer.Option(
            "--concepts", help="concepts to sweep with (the config's first N; under 5 is thin)"
        ),
    ] = 5,
    grid: Annotated[
        str, typer.Option(help="the βs to try, comma-separated")
    ] = "0.01,0.02,0.05,0.1,0.2,0.3,0.5,1",
    list_: Annotated[
        bool,
        typer.Option(
            "--list", help="list the ranges recorded under classifier.dir (no sweep); --json too"
        ),
    ] = False,
    clear: Annotated[
        bool,
        typer.Option(
            help="remove the recorded ranges (narrowed by --model, --layer, --set "
            "steering.vector_source=...): runs go back to their config's β"
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="--clear without asking")] = False,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Find the coherent range of β for a model and layer, and record it with the model's
    classifiers: a run on that model then takes its β from it (steering.beta auto, or a
    config β outside it). --list shows the recorded ranges, --clear removes them."""
    setup_logging(verbose)
    from experiments.config import ConfigError, Phase5Config
    from experiments.kernel.layers import resolve_layer
    from experiments.kernel.lifecycle import load_graph
    from experiments.strength.sweep import calibrate_strength as sweep
    from experiments.strength.sweep import parse_grid

    wanted = parse_layer(layer)
    if list_ or clear:
        list_or_clear(config, set_, model, wanted, clear, yes, json_)
        return
    try:
        betas = parse_grid(grid)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    if wanted == "auto-effect":
        raise typer.BadParameter(
            "--layer auto-effect steers each layer at the β its recorded range gives: "
            "calibrate a layer by number, or the one auto picks"
        )
    fixed = wanted if isinstance(wanted, int) else None
    given = resolve_config(config, set_, model, fixed, concepts, "phase5")
    assert isinstance(given, Phase5Config)  # resolve_config(..., "phase5") reads that model
    say = console.print
    cfg, lm, _embedder, _choice = resolve_layer(given, wanted, lambda msg: say(f"[dim]{msg}"))
    if lm is None:
        with console.status(f"loading {cfg.model}"):
            lm = cfg.model_spec.load()
    graph = load_graph(cfg)
    at = lm.check_layer(cfg.layer if cfg.layer is not None else lm.default_layer)
    with progress_bars() as report:
        record, path = sweep(
            cfg,
            lm,
            graph,
            at,
            betas,
            progress=lambda done, total: report("texts", done, total),
            say=lambda msg: say(f"[dim]{msg}"),
        )
    if json_:
        print_json({"path": str(path), **record.model_dump(mode="json")})
        return
    _print_range(record, path)
    if record.run_id is not None:
        show_run_address(record.run_id)


def _print_range(record: StrengthRange, path: Path) -> None:
    from experiments.strength_range import thin_note

    table = Table(
        "β",
        "s",
        "arm",
        "perplexity ×",
        "near-empty",
        "distinct-2",
        "coherent",
        title=f"{record.model_id}, layer {record.layer}: steered texts against unsteered",
    )
    base = record.unsteered
    table.add_row(
        "0", "0", "", "1", number(base.near_empty, ".2f"), number(base.distinct_2, ".2f"), ""
    )
    for step in record.steps:
        table.add_row(
            f"{step.beta:g}",
            f"{step.sign:+d}",
            step.arm,
            number(step.perplexity_multiple, ".1f"),
            number(step.near_empty, ".2f"),
            number(step.distinct_2, ".2f"),
            "yes" if step.coherent else "no: " + "; ".join(step.why),
        )
    out.print(table)
    found = (
        f"coherent β {record.low:g} to {record.high:g}; a run on this model and layer takes "
        f"β {record.beta:g} for steering.beta auto or a config β outside the range"
        if record.beta is not None
        else "no β of the grid is coherent; try smaller ones (--grid)"
    )
    console.print(f"{found}; recorded in {path} ({record.seconds:.0f} s)")
    if record.warnings:
        console.print(f"[bold yellow]warning:[/] {escape(thin_note(record))}", highlight=False)


def list_or_clear(
    config: Path,
    set_: list[str] | None,
    model: str | None,
    layer: int | str | None,
    clear: bool,
    yes: bool,
    json_: bool,
) -> None:
    """``--list`` / ``--clear``: the ranges recorded under the config's ``classifier.dir``,
    narrowed to what the command line names (``--model``, ``--layer``, ``--set`` of
    ``steering.mode`` or ``steering.vector_source``). None recorded: ``--list`` says so
    (an empty list in ``--json``, exit 0), ``--clear`` is refused (nothing to remove)."""
    from experiments import strength_range as ranges
    from experiments.config import ConfigError, parse_override

    if isinstance(layer, str):
        raise typer.BadParameter(f"--layer {layer} sweeps layers: give a layer number, or none")
    if clear and json_ and not yes:
        raise typer.BadParameter("--clear --json needs --yes (a question would break the JSON)")
    cfg = resolve_config(config, set_, model, layer, None, "phase5")
    given = {".".join(parse_override(text)[0]) for text in set_ or []}
    model_id = None
    if model is not None or "model" in given:
        from steering.preflight import probe_id_of_spec

        model_id = probe_id_of_spec(cfg.model_spec).split("@")[0]  # every dtype of it
    steering = cfg.steering
    mode = steering.mode if "steering.mode" in given else None
    source = steering.vector_source if "steering.vector_source" in given else None
    root = Path(cfg.classifier.dir)
    found = ranges.recorded_ranges(root, model_id, layer, mode, source)
    rows = [_range_row(where, record) for where, record in found]
    if not rows and (clear or not json_):  # an empty --list --json is a list: not an error
        selection = {"model": model_id, "layer": layer, "mode": mode, "vector_source": source}
        narrowed = ", ".join(f"{k} {v}" for k, v in selection.items() if v is not None)
        none = (
            f"no strength range recorded under {root}"
            + (f" for {narrowed}" if narrowed else "")
            + ("; nothing to clear" if clear else "")
            + " (`steer-eval calibrate-strength` records one)"
        )
        if clear:  # asked to remove what is not there
            raise ConfigError(none)
        console.print(none, highlight=False, markup=False)
    elif clear:
        if not json_:
            _print_ranges(rows, f"to remove under {root}")
        if not yes:
            typer.confirm(f"remove these {len(rows)} recorded ranges?", abort=True)
        for where, _record in found:
            ranges.remove_range(where)
        if json_:
            print_json({"removed": rows})
        else:
            console.print(
                f"removed {len(rows)} recorded ranges: runs there take their config's β again"
            )
    elif json_:
        print_json({"root": str(root), "ranges": rows})
    else:
        _print_ranges(rows, f"recorded under {root}")


def _range_row(where: Path, record: StrengthRange) -> dict[str, Any]:
    import datetime

    from experiments.strength_range import RANGE_FILE

    path = where / RANGE_FILE
    when = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.UTC)
    return {
        "path": str(path),
        "classifier_set": where.name,
        "model_id": record.model_id,
        "layer": record.layer,
        "mode": record.mode,
        "vector_source": record.vector_source,
        "low": record.low,
        "high": record.high,
        "beta": record.beta,
        "recorded": when.isoformat(timespec="seconds"),
        "run_id": record.run_id,
        "thin": bool(record.warnings),
        "warnings": list(record.warnings),
    }


def _print_ranges(rows: list[dict[str, Any]], where: str) -> None:
    """The ranges as a table narrow enough for a terminal (the model's id folds; the
    mode, always additive for a sweep, and each file's path are in ``--json``)."""
    from rich import box
    from rich.table import Column

    def fixed(name: str, width: int) -> Column:
        return Column(name, min_width=width, no_wrap=True)

    table = Table(
        Column("model", overflow="fold", ratio=1),
        fixed("L", 2), fixed("source", 8), fixed("range", 9), fixed("β", 4),
        fixed("recorded", 10), fixed("run", 8), fixed("thin", 4),
        title=f"strength ranges {where}", box=box.SIMPLE_HEAD, pad_edge=False,
    )  # fmt: skip
    for r in rows:
        span = "none" if r["low"] is None else f"{r['low']:g}-{r['high']:g}"
        table.add_row(
            r["model_id"] + ("" if r["mode"] == "additive" else f" ({r['mode']})"),
            str(r["layer"]),
            r["vector_source"],
            span,
            number(r["beta"], "g"),
            r["recorded"][:10],
            (r["run_id"] or "")[:8],
            "yes" if r["thin"] else "no",
        )
    out.print(table)
    for r in rows:
        if r["thin"]:
            out.print(f"thin: {r['path']}: {'; '.join(r['warnings'])}", highlight=False)
