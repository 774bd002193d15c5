"""``steer-eval classifiers``: Phase 4, a linear probe per concept at one or several
layers, with its detection metrics and direction diagnostics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.table import Table

from experiments.answer import number
from experiments.cli.common import (
    DEFAULT_CONFIG,
    ConceptsOpt,
    ConfigOpt,
    JsonOpt,
    LayerOpt,
    ModelOpt,
    SetOpt,
    VerboseOpt,
    console,
    friendly,
    out,
    print_json,
    resolve_config,
    setup_logging,
    show_run_address,
)

if TYPE_CHECKING:
    from experiments.kernel.probes import ProbeSet


def register(app: typer.Typer) -> None:
    app.command()(friendly(classifiers))


def classifiers(
    config: ConfigOpt = DEFAULT_CONFIG,
    set_: SetOpt = None,
    model: ModelOpt = None,
    layer: LayerOpt = None,
    layers: Annotated[
        str | None,
        typer.Option(help="several layers from one model pass, e.g. 3,6,9,12,15"),
    ] = None,
    concepts: ConceptsOpt = None,
    train: Annotated[str | None, typer.Option(help="PxNxU training prompts, e.g. 5x5x5")] = None,
    json_: JsonOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Phase 4: train and evaluate one linear probe per concept (always retrains)."""
    setup_logging(verbose)
    from experiments.concepts import load_concepts
    from experiments.kernel.classifiers import train_layers
    from experiments.kernel.probes import best_layer, parse_layers

    if layers is not None and layer is not None:
        raise typer.BadParameter("give --layer or --layers, not both")
    try:
        wanted = parse_layers(layers) if layers is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    overrides = list(set_ or []) + ([f"classifier.train={train}"] if train else [])
    cfg = resolve_config(config, overrides, model, layer, concepts)
    graph = load_concepts(cfg.concepts.file, limit=cfg.concepts.limit, synsets=cfg.concepts.synsets)
    with console.status(f"loading {cfg.model}"):
        lm = cfg.model_spec.load()
    if wanted is None:
        wanted = [cfg.layer if cfg.layer is not None else lm.default_layer]
    chosen = sorted({lm.check_layer(la) for la in wanted})  # a clear error when out of range
    with console.status(f"training {len(graph.concepts)} probes at layers {chosen}"):
        sets = train_layers(cfg, lm, graph, chosen, concept_file=cfg.concepts.file)
    first = sets[chosen[0]]
    if json_:
        print_json(
            {
                "run_id": first.run_id,
                "seconds": first.seconds,
                "best_layer": best_layer(sets),
                "layers": {
                    str(la): {
                        "directory": str(result.directory),
                        "means": result.means(),
                        "concepts": {
                            k: {m: v for m, v in p.metrics.items() if m != "confusion"}
                            for k, p in result.probes.items()
                        },
                    }
                    for la, result in sets.items()
                },
            }
        )
        return
    for la, result in sets.items():
        _print_probe_set(la, result)
    if len(sets) > 1:
        _print_layers(sets, best_layer(sets), lm.default_layer)
    console.print(f"{first.seconds:.1f} s; MLflow run {first.run_id}")
    show_run_address(cast(str, first.run_id))  # train_layers logs every set it trains


def _print_probe_set(layer: int, result: ProbeSet) -> None:
    table = Table(
        "concept",
        "AUROC",
        "AP",
        "F1 raw (>0)",
        "F1 calibrated",
        "threshold",
        "|cos fmt|",
        "cos diffmean",
        title=f"layer {layer}: test-split metrics",
    )
    diag = result.diagnostics
    probe_diag = diag.get("sources", {}).get("classifier", {})
    cos_fmt = probe_diag.get("cos_format_axis") or {}
    cos_dm = diag.get("cos_probe_diffmean", {})
    for synset, probe in result.probes.items():
        m = probe.metrics
        table.add_row(
            synset,
            number(m["auroc"], ".3f"),
            number(m["ap"], ".3f"),
            number(m["f1_raw"], ".3f"),
            number(m["f1_calibrated"], ".3f"),
            number(m["threshold"], ".3f"),
            number(abs(cos_fmt[synset]) if synset in cos_fmt else None, ".3f"),
            number(cos_dm.get(synset), ".3f"),
        )
    means = result.means()
    table.add_row(
        "[bold]mean",
        *(
            f"[bold]{number(means.get(k), '.3f')}"
            for k in ("auroc", "ap", "f1_raw", "f1_calibrated")
        ),
        "",
        number(probe_diag.get("mean_abs_cos_format_axis"), ".3f"),
        number(diag.get("mean_cos_probe_diffmean"), ".3f"),
    )
    out.print(table)
    floor = diag.get("format_axis_floor")
    console.print(f"|cos fmt| floor (a format-free 1x1x1-like difference): {number(floor, '.3f')}")
    ratio = means.get("class_ratio")
    console.print(
        f"test split positives/negatives = {number(ratio, '.3f')}; mean pairwise cosine of the "
        + ", ".join(
            f"{s} directions {number(d.get('mean_pairwise_cosine'), '.3f')}"
            for s, d in diag.get("sources", {}).items()
        )
        + f"; saved to {result.directory}"
    )


def _print_layers(sets: dict[int, ProbeSet], best: int, default: int) -> None:
    table = Table("layer", "mean AUROC", "mean AP", "mean F1 cal.", "mean cos", title="by layer")
    for la, result in sets.items():
        m = result.means()
        cos = result.diagnostics.get("sources", {}).get("classifier", {})
        table.add_row(
            f"L{la}" + (" (best)" if la == best else "") + (" (default)" if la == default else ""),
            *(f"{m.get(k, float('nan')):.3f}" for k in ("auroc", "ap", "f1_calibrated")),
            f"{cos.get('mean_pairwise_cosine', float('nan')):+.3f}",
        )
    out.print(table)
    console.print(
        f"best layer by mean test AUROC: {best} (the default steering layer is {default})"
    )
