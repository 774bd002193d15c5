"""``steer-eval calibrate-strength``: a model's coherent range of β, and ``--layer auto``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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


def register(app: typer.Typer) -> None:
    app.command("calibrate-strength")(friendly(calibrate_strength))


def kept_keys(
    set_: list[str] | None, cfg: Any, config: Path, overlays: list[Path] | None = None
) -> frozenset[str]:
    """The config keys a recorded strength range never replaces: those set on the
    command line (``--set steering.beta=...``), and the β of a config run on the model
    its file names (phase5.yaml's 0.2 for the embedded 270M, so `make run` never
    changes). Which model that is is decided on the model the run resolves to (its probe
    id: id and dtype), never on how it was spelled: ``run`` and ``run --model embedded``
    on phase5.yaml keep the same β. On another model a config β outside that model's
    recorded range is replaced by the range's. ``cfg``: the resolved config (None for a
    resume, which keeps its stored β); ``config``, ``overlays``: the file(s) as given."""
    from experiments.cli.common import user_errors
    from experiments.config import load_config, parse_override
    from steering.preflight import probe_id_of_spec

    explicit = frozenset(".".join(parse_override(text)[0]) for text in set_ or [])
    if cfg is None:
        return explicit
    own = load_config(config, [], cfg.phase, overlays or []).model_spec
    run = cfg.model_spec
    if own == run:
        return explicit | {"steering.beta"}
    try:
        same = probe_id_of_spec(own) == probe_id_of_spec(run)
    except user_errors():  # not here: not the run's model (whose own load says why)
        same = False
    return explicit | {"steering.beta"} if same else explicit


def with_layer(cfg: Any, layer: int | str | None, say) -> tuple[Any, Any]:
    """(the config with its layer, the loaded model or None): ``auto`` loads the model and
    picks the layer from the probe sweep (``kernel/layers.py``)."""
    if layer != "auto":
        return cfg, None
    from experiments.kernel.layers import pick_layer
    from experiments.kernel.lifecycle import load_graph

    say(f"loading {cfg.model}")
    lm = cfg.model_spec.load()
    chosen, _sets = pick_layer(cfg, lm, load_graph(cfg), say=say)
    return cfg.model_copy(update={"layer": chosen}), lm


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
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Find the coherent range of β for a model and layer, and record it with the model's
    classifiers: a run on that model then takes its β from it (steering.beta auto, or a
    config β outside it)."""
    setup_logging(verbose)
    from experiments.config import ConfigError
    from experiments.kernel.lifecycle import load_graph
    from experiments.strength.sweep import calibrate_strength as sweep
    from experiments.strength.sweep import parse_grid

    wanted = parse_layer(layer)
    try:
        betas = parse_grid(grid)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    fixed = wanted if isinstance(wanted, int) else None
    cfg = resolve_config(config, set_, model, fixed, concepts, "phase5")
    say = console.print
    cfg, lm = with_layer(cfg, wanted, lambda msg: say(f"[dim]{msg}"))
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


def _print_range(record, path: Path) -> None:
    from experiments.strength.range import thin_note

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
        "0", "0", "", "1", number(base["near_empty"], ".2f"), number(base["distinct_2"], ".2f"), ""
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
