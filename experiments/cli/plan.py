"""``--dry-run`` of ``run``, ``calibrate`` and ``identify``: the checked plan in the
terminal (experiments.kernel.estimate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.table import Table

from experiments.cli.common import out, print_json

if TYPE_CHECKING:
    from experiments.config import RunConfig
    from experiments.kernel.estimate import Plan


def print_plan(
    cfg: RunConfig,
    as_json: bool,
    explicit: frozenset[str] = frozenset(),
    layer_rule: str | None = None,
) -> None:
    """``run --dry-run``: the model checked, what the run would generate, its stages, the
    β it would take (``explicit``: the keys a recorded range never replaces) and an
    estimate from an earlier run of the same model on this device. ``layer_rule``
    (``--layer auto`` or ``auto-effect``): first what the rule would compare, measure and
    cost (``kernel/layers.preview``)."""
    from experiments.kernel.estimate import plan_run
    from experiments.kernel.lifecycle import load_graph

    graph = load_graph(cfg)
    shown = None
    if layer_rule is not None:
        from experiments.kernel.layers import preview

        shown = preview(cfg, graph, layer_rule, explicit)
    plan = plan_run(cfg, graph, explicit)
    if as_json:
        print_json({**_json(cfg, plan), **({"layer_rule": shown.to_dict()} if shown else {})})
        return
    for line in shown.lines() if shown else []:
        out.print(line, highlight=False, markup=False)
    _print_setup(plan)
    table = Table("split: rows", "rows", title=f"plan: {plan.n_concepts} concepts, {cfg.model}")
    for what, n in plan.rows.items():
        table.add_row(what, str(n))
    table.add_row("[bold]all", f"[bold]{plan.n_rows}")
    out.print(table)
    out.print(
        f"at most {plan.max_tokens:,} new tokens ({plan.n_rows} rows × "
        f"{plan.max_new_tokens}) into {cfg.results_dir}/<run id>; nothing was loaded "
        "or generated",
        highlight=False,
    )
    _print_estimate(plan)


def print_study_plan(
    cfg: RunConfig,
    phase: str,
    stages: list[str],
    as_json: bool,
    layers: list[int] | None = None,
    strength: Callable[[Plan, list[int]], list[str]] | None = None,
    costs: Callable[[Plan], tuple[list[str], dict[str, Any]]] | None = None,
) -> None:
    """``calibrate --dry-run`` / ``identify run --dry-run``: the model and every layer the
    study steers checked, its stages, where its β and grid would come from
    (``strength(plan, layers)``: sentences), an estimate from an earlier study, and
    ``costs(plan)``: (sentences, a JSON-able dict) such as identify's cost per concept."""
    from experiments.kernel.estimate import plan_study

    plan = plan_study(cfg, phase, stages)
    for layer in layers or []:
        plan.model.check_layer(layer)
    if strength is not None:
        plan.strength = strength(plan, list(layers or [plan.layer]))
    lines, extra = costs(plan) if costs is not None else ([], {})
    if as_json:
        print_json({**_json(cfg, plan), **extra})
        return
    _print_setup(plan)
    out.print(f"into {cfg.results_dir}/<run id>; nothing was loaded or generated", highlight=False)
    _print_estimate(plan)
    for line in lines:
        out.print(line, highlight=False, markup=False)


def _json(cfg: RunConfig, plan: Plan) -> dict[str, Any]:
    return {
        "dry_run": True,
        "config_hash": cfg.config_hash(),
        "results_dir": str(cfg.results_dir),
        **plan.to_dict(),
    }


def _print_setup(plan: Plan) -> None:
    m = plan.model
    out.print(
        f"model {m.model_id} ({m.architecture}, {m.n_layers} layers, hidden {m.hidden_size}; "
        f"found: {m.found_in}, {m.source})\n"
        f"device {m.device}, dtype {m.dtype_name}, layer {plan.layer} of 0..{m.n_layers - 1}, "
        f"batch size {plan.batch_size}\n"
        f"stages: {' → '.join(plan.stages)}",
        highlight=False,
        markup=False,
    )
    for line in [*plan.strength, *plan.vectors]:
        out.print(line, highlight=False, markup=False)


def _print_estimate(plan: Plan) -> None:
    e = plan.estimate
    if e is None:
        out.print(f"no estimate: {plan.no_estimate}", highlight=False, markup=False)
        return
    scaled = "" if e.scale == 1.0 else f", per-row stages scaled ×{e.scale:.2f} to this plan"
    busy = (
        f"; the reference ran with load {e.load:.2f} on {e.cpus} cores, so it may "
        "overstate the time"
        if e.under_load
        else ""
    )
    out.print(
        f"estimated time: about {e.seconds / 60:.1f} min, the {len(e.stages)} stages of run "
        f"{e.run_name!r} ({e.run_id}) on the same model, device and vector source{scaled}: "
        + ", ".join(f"{k} {v:.0f} s" for k, v in e.scaled.items())
        + busy,
        highlight=False,
        markup=False,
    )
