"""``steer-eval run --dry-run``: the plan in the terminal (experiments.pipeline.estimate)."""

from __future__ import annotations

from rich.table import Table

from experiments.cli.common import out, print_json


def print_plan(cfg, as_json: bool) -> None:
    """``run --dry-run``: what the run would generate and about how long it would take."""
    from experiments.pipeline.estimate import plan_run
    from experiments.pipeline.lifecycle import load_graph
    from steering.models import check_model_spec

    check_model_spec(cfg.model)  # a plan for a model folder that is not there helps nobody
    plan = plan_run(cfg, load_graph(cfg))
    if as_json:
        print_json(
            {
                "dry_run": True,
                "config_hash": cfg.config_hash(),
                "results_dir": str(cfg.results_dir),
                **plan.to_dict(),
            }
        )
        return
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
    if plan.speed is not None and plan.seconds is not None:
        out.print(
            f"estimated generation time: about {plan.seconds / 60:.1f} min at "
            f"{plan.speed.tokens_per_second:.1f} tokens/s, the speed of run "
            f"{plan.speed.run_name!r} ({plan.speed.run_id}, {plan.speed.match})",
            highlight=False,
        )
        others = plan.speed.other_stages
        if others and plan.total_seconds is not None:
            longest = sorted(others.items(), key=lambda kv: -kv[1])[:4]
            out.print(
                f"estimated run time, every stage: about {plan.total_seconds / 60:.1f} min "
                f"(the other stages as long as in that run, {sum(others.values()):.0f} s: "
                + ", ".join(f"{k} {v:.0f} s" for k, v in longest)
                + "); classifier training, when needed, comes on top",
                highlight=False,
            )
        else:
            out.print(
                "that run recorded no other stages: model loading, scoring and logging come on top",
                highlight=False,
            )
    else:
        out.print(f"no time estimate: {plan.speed_note}", highlight=False)
