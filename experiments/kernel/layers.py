"""Stage: ``--layer auto`` and ``--layer auto-effect``, the steering layer chosen by a rule.

The middle layer is a guess that suited Gemma 3. Two rules compare the same candidates
(:func:`sweep_layers`: the middle half of the model), each named for what it optimises
(:data:`RULES`):

- ``auto`` (:func:`pick_layer`): the best mean test AUROC of the probes. The suite already
  compares layers from one model pass (``train_layers``, ``steer-eval classifiers
  --layers``); auto reuses the layers whose classifiers are saved and trains the rest in
  one pass. Cheap, and nothing is generated, but it ranks layers by the very predictor
  the suite tests, so a run that chose its layer this way has its layer tied to its
  predictor.
- ``auto-effect`` (:func:`effect_layer`): the best *measured* steering effect. At each
  candidate layer the concept directions are steered at the β the run would take there
  (``strength_range.choose_beta``: the layer's recorded range, else the config's β; one
  β per layer) on the **selection prompts only** (``plan.split_prompts``, the prompts
  held-out strength selection chooses β on: the report prompts the run scores are never
  generated here; so the run must hold them out, ``selection.mode: heldout``, else it is
  an error), beside the run's random directions at the same α·β. The effect above
  that null is the suite's (``effect.paired_effects`` and ``above_null``: the gated e of
  the concept arm minus the random arms' on the same unit; both signs pooled, as
  held-out selection pools them), estimated with its interval over concepts
  (``effect.mean_ci``: concepts resampled, then units). The layer with the largest
  **lower bound** wins; ties go to the larger estimate, then the earlier layer.

Why the lower bound and not the estimate: the candidates share the concepts, prompts and
seeds, so their intervals differ in width only through how much the concepts disagree.
The lower bound prefers a layer that moves every concept over one that moves one concept
a lot and the others not at all, which is what a run scored over concepts needs; and with
the few texts the choice affords it is less swayed by one lucky text. A layer whose every
steered text fails the coherence gate (its gated effect is 0 by the gate) is not
evaluable and ranks last; when none is evaluable the rule stops with an error rather than
guess. When no layer's interval lies above 0 the rule still takes the largest lower
bound, but says so (``kernel/layer_table.undistinguished``: in the terminal, and as a
note of the run's answer beside the per-layer table, ``layer_table.answer_table``): the
layer is then no better supported than its neighbours.

Cost: per layer, concepts × selection prompts × samples × (1 + signs × (1 + random
directions)) texts of ``generation.max_new_tokens``, plus the probes of layers not yet
trained (one pass). The texts live in a temporary folder for the choice only; the table
goes into the run record (``RunRecord.layer_choice``, ``layer_choice.json`` in the run
folder) and the run's tags (:data:`LAYER_RULE_TAG`, :data:`LAYER_TABLE_TAG`).
:func:`preview` is the dry run's: the candidates, what will be measured and its
estimated cost, from the model's config alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pandas as pd

from experiments.concepts import ConceptGraph
from experiments.config import ConfigError, RunConfig
from experiments.kernel.classifiers import train_layers
from experiments.kernel.effect import SIGNS, above_null, all_gated, mean_ci, paired_effects
from experiments.kernel.layer_table import effect_cell, num, undistinguished
from experiments.kernel.plan import CONCEPT_ARM, planned_rows, split_prompts
from experiments.kernel.probes import (
    ProbeSet,
    best_layer,
    classifier_dir,
    graph_key,
    load_classifiers,
    probe_path,
)
from experiments.record import LayerChoice, LayerRow
from experiments.strength_range import choose_beta, load_range
from metrics.intervals import not_evaluable
from steering.models import LoadedModel
from steering.probes import ProbeError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

# Where the sweep looks: the quarter, three eighths, half, five eighths, three quarters.
SWEEP_FRACTIONS = (0.25, 0.375, 0.5, 0.625, 0.75)
# What each rule maximises, as the CLI, the record and the tags name it.
RULES: dict[str, str] = {
    "auto": "the probes' mean test AUROC (one model pass, nothing generated; the predictor "
    "the suite tests)",
    "auto-effect": "the measured steering effect above random directions on the selection "
    "prompts (the lower bound of its interval over concepts)",
}
LAYER_RULE_TAG = "steer_eval.layer_rule"  # a parent run's tag: the rule that chose its layer
LAYER_TABLE_TAG = "steer_eval.layer_table"  # and what it read per layer, in a line
# The stages of an earlier run that the texts of auto-effect cost (kernel/estimate.py)
EFFECT_STAGES = ("generation", "perplexity", "embedding")


def sweep_layers(n_layers: int) -> list[int]:
    """The layers ``--layer auto`` compares: 4, 7, 9, 11, 14 of the 270M's 18."""
    return sorted({min(n_layers - 1, max(0, round(n_layers * f))) for f in SWEEP_FRACTIONS})


def probe_sets(
    config: RunConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layers: Sequence[int] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
    rule: str = "auto",
) -> dict[int, ProbeSet]:
    """Every candidate layer's probe set: saved classifiers reused, missing layers
    trained together (one model pass)."""
    wanted = sorted({lm.check_layer(la) for la in (layers or sweep_layers(lm.n_layers))})
    sets: dict[int, ProbeSet] = {}
    for layer in wanted:
        try:
            sets[layer] = load_classifiers(config, graph, lm.probe_id, layer)
        except ProbeError as exc:
            if "no classifier" not in str(exc):
                raise
    missing = [la for la in wanted if la not in sets]
    if missing:
        say(f"layer {rule}: training probes at layers {missing} (one model pass)")
        sets.update(train_layers(config, lm, graph, missing, concept_file=config.concepts.file))
    return {la: sets[la] for la in wanted}  # in layer order, loaded or trained


def mean_auroc(probes: ProbeSet) -> float | None:
    return probes.means().get("auroc")


def pick_layer(
    config: RunConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    layers: Sequence[int] | None = None,
    say: Callable[[str], None] = lambda _msg: None,
) -> tuple[int, dict[int, ProbeSet]]:
    """``auto``: (the layer with the best mean test AUROC, every layer's probe set)."""
    sets = probe_sets(config, lm, graph, layers, say)
    best = best_layer(sets)
    aurocs = ", ".join(f"L{la} {sets[la].means().get('auroc', float('nan')):.3f}" for la in sets)
    say(f"layer auto: {best} (mean test AUROC by layer: {aurocs})")
    return best, sets


def auroc_choice(layer: int, sets: Mapping[int, ProbeSet], seconds: float = 0.0) -> LayerChoice:
    """The record of an ``auto`` choice: the AUROC of every candidate."""
    rows = {str(la): LayerRow(auroc=mean_auroc(sets[la])) for la in sorted(sets)}
    return LayerChoice(rule="auto", optimises=RULES["auto"], layer=layer, layers=rows,
                       seconds=seconds)  # fmt: skip


def selection_config(config: RunConfig) -> RunConfig:
    """The config auto-effect generates with, checked: the run must hold its selection
    prompts out of its report (``selection.mode: heldout``; without it every prompt is
    a report prompt, and a layer chosen on them would be scored on the texts it was
    chosen by), have some, and have a null (random directions)."""
    if config.controls.random_directions < 1:
        raise ConfigError(
            "--layer auto-effect measures the effect above random directions: set "
            "controls.random_directions to 1 or more, or choose the layer with auto"
        )
    if config.selection.mode != "heldout":
        raise ConfigError(
            "--layer auto-effect chooses on the selection prompts, which a run with "
            "selection.mode none scores too: add --selection heldout (held-out β per "
            "concept on the same prompts), or choose the layer with auto"
        )
    selection, _report = split_prompts(len(config.generation.prompts), config)
    if not selection:
        raise ConfigError(
            "--layer auto-effect steers the selection prompts only: give "
            "generation.prompts at least 2 prompts (one to choose on, one to report)"
        )
    return config


def texts_per_layer(config: RunConfig, graph: ConceptGraph) -> int:
    """The texts auto-effect generates at one layer (no model needed)."""
    return sum(1 for _ in planned_rows(selection_config(config), graph, "selection",
                                       null_arms=True))  # fmt: skip


def layer_effect(records: pd.DataFrame, config: RunConfig) -> LayerRow:
    """One layer's row of the auto-effect table from its scored selection texts (every
    arm, the unsteered twins too): the gated effect above the null with its interval over
    concepts, both signs pooled, and each sign's estimate."""
    effects = paired_effects(records, config)
    concept = effects[effects["arm"] == CONCEPT_ARM]
    null = above_null(effects)
    ci = mean_ci(null, "above_null", config)
    reason = all_gated(concept, "this layer") or ("" if ci.evaluable else ci.reason)
    signs = {
        label: float(part["above_null"].mean()) if len(part) and not reason else None
        for sign, label in SIGNS.items()
        for part in [null[null["sign"] == sign]]
    }
    return LayerRow(
        effect=not_evaluable(reason, ci.n, ci.n_clusters, ci.method) if reason else ci,
        effect_pos=signs["pos"],
        effect_neg=signs["neg"],
        texts=len(records),
        gate_pass=float(concept["gate_pass"].mean()) if len(concept) else None,
    )


def best_by_effect(table: Mapping[int, LayerRow]) -> int:
    """The layer of largest lower bound (ties: larger estimate, then the earlier layer);
    a layer not evaluable ranks last. An error when no layer is evaluable."""
    ends = {la: e for la, row in table.items() if row.effect and (e := row.effect.ends())}
    if not ends:
        why = "; ".join(f"L{la}: {_why(table[la])}" for la in sorted(table))
        raise ConfigError(f"--layer auto-effect: no layer's effect is evaluable ({why})")
    return max(sorted(ends), key=lambda la: (ends[la][1], ends[la][0], -la))


def _why(row: LayerRow) -> str:
    """Why a layer's effect is not evaluable."""
    return (row.effect.reason if row.effect is not None else "") or "no texts"


def effect_layer(
    config: RunConfig,
    lm: LoadedModel,
    graph: ConceptGraph,
    embedder: Any,
    layers: Sequence[int] | None = None,
    explicit: frozenset[str] = frozenset(),
    say: Callable[[str], None] = lambda _msg: None,
) -> LayerChoice:
    """``auto-effect``: every candidate layer steered on the selection prompts at its
    own β, the effect above the null measured, the best lower bound chosen (the module
    docstring). ``explicit``: the config keys the command line set (``choose_beta``)."""
    from tempfile import TemporaryDirectory

    from experiments.kernel.generate import generate_rows
    from experiments.kernel.plan import build_plan
    from experiments.kernel.score import build_scorer, score_all
    from experiments.kernel.vectors import build_vectors
    from experiments.rundir import RunDir, join_scores, plan_order
    from experiments.timer import Timer

    started = time.perf_counter()
    measured = selection_config(config)
    sets = probe_sets(config, lm, graph, layers, say, "auto-effect")
    scorer = build_scorer(config, graph, embedder)
    table: dict[int, LayerRow] = {}
    with TemporaryDirectory(prefix="steer-eval-layer-effect-") as tmp:
        for layer in sorted(sets):
            probes = sets[layer]
            cfg = choose_beta(measured, load_range(probes.directory), probes.directory,
                              explicit).config  # fmt: skip
            beta = float(cast(float, cfg.steering.beta))
            vectors = build_vectors(cfg, lm, graph, probes, layer)
            plan = build_plan(cfg, graph, vectors, "selection", null_arms=True)
            say(f"layer auto-effect: L{layer} at β {beta:g}, {len(plan.rows)} selection texts")
            run_dir = RunDir(tmp, f"layer-{layer}").create()
            generate_rows(cfg, plan, vectors, lm, run_dir, Timer())
            rows = plan_order(run_dir.read_generations())
            records = pd.DataFrame(join_scores(rows, score_all(scorer, rows)))
            row = layer_effect(records, cfg)
            table[layer] = row.model_copy(update={"auroc": mean_auroc(probes), "beta": beta})
            say(f"layer auto-effect: {_cell(layer, table[layer])}")
    best = best_by_effect(table)
    choice = LayerChoice(
        rule="auto-effect",
        optimises=RULES["auto-effect"],
        layer=best,
        layers={str(la): table[la] for la in sorted(table)},
        seconds=time.perf_counter() - started,
    )
    say(f"layer auto-effect: {best} ({table_line(choice)})")
    if warning := undistinguished(choice):
        say(f"layer auto-effect: {warning}")
    return choice


def table_line(choice: LayerChoice) -> str:
    """The per-layer table in a line (the run's :data:`LAYER_TABLE_TAG`)."""
    if choice.rule == "auto":
        cells = [f"L{la} {num(r.auroc)}" for la, r in choice.layers.items()]
        return "mean test AUROC by layer: " + ", ".join(cells)
    cells = [_cell(int(la), r) for la, r in choice.layers.items()]
    return "effect above null by layer, with its interval over concepts: " + "; ".join(cells)


def _cell(layer: int, row: LayerRow) -> str:
    """One layer of the auto-effect table: effect [interval] (AUROC), or why not."""
    evaluable = row.effect is not None and row.effect.evaluable
    auroc = f" (AUROC {num(row.auroc)})" if evaluable else ""
    return f"L{layer} {effect_cell(row, 'no texts')}{auroc}"


def choice_tags(choice: LayerChoice) -> dict[str, str]:
    """The parent run's tags: which rule chose the layer (and what it optimises), its table."""
    return {
        LAYER_RULE_TAG: f"{choice.rule}: {choice.optimises}",
        LAYER_TABLE_TAG: table_line(choice),
    }


@dataclass
class LayerPreview:
    """The dry run of a layer rule: what it would compare, measure and cost."""

    rule: str
    layers: list[int]
    saved: list[int]  # candidates whose classifiers are saved
    betas: dict[int, float] = field(default_factory=dict)  # auto-effect: β per layer
    texts_per_layer: int = 0
    max_new_tokens: int = 0
    seconds: float | None = None  # the texts' estimated time (an earlier run's, scaled)
    no_estimate: str = ""

    @property
    def train(self) -> list[int]:
        return [la for la in self.layers if la not in self.saved]

    @property
    def texts(self) -> int:
        return self.texts_per_layer * len(self.layers)

    def lines(self) -> list[str]:
        said = [
            f"layer {self.rule} maximises {RULES[self.rule]}",
            f"candidate layers {self.layers}: probes saved at {self.saved or 'none'}, "
            f"trained at {self.train or 'none'} (one model pass)",
        ]
        if self.rule == "auto":
            return [*said, "it generates nothing; the plan below is at the middle layer"]
        betas = ", ".join(f"L{la} {b:g}" for la, b in self.betas.items())
        cost = (
            f"about {self.seconds / 60:.1f} min for the texts (an earlier run's generation, "
            "perplexity and embedding, scaled), the probes' training not counted"
            if self.seconds is not None
            else f"no estimate: {self.no_estimate}"
        )
        return [
            *said,
            f"measures, per layer: {self.texts_per_layer} texts (selection prompts only: "
            "concept and random directions at both signs, and the unsteered twins) of at "
            f"most {self.max_new_tokens} tokens, at β {betas}; the gated effect above the "
            "random directions with its interval over concepts",
            f"{self.texts} texts in all; {cost}",
            "the plan below is at the middle layer; the run steers the layer chosen",
        ]

    def to_dict(self) -> dict[str, object]:
        return {
            "rule": self.rule,
            "optimises": RULES[self.rule],
            "layers": self.layers,
            "saved": self.saved,
            "train": self.train,
            "betas": {str(k): v for k, v in self.betas.items()},
            "texts_per_layer": self.texts_per_layer,
            "texts": self.texts,
            "max_new_tokens": self.max_new_tokens,
            "estimated_seconds": self.seconds,
            "note": self.no_estimate,
        }


def preview(
    config: RunConfig,
    graph: ConceptGraph,
    rule: str,
    explicit: frozenset[str] = frozenset(),
) -> LayerPreview:
    """What ``--layer rule`` would do, read from the model's config (no weights): the
    candidates, whose probes are saved, and for auto-effect the β per layer (an error
    where the run's would fail), the texts and their time from an earlier run."""
    from experiments.kernel.estimate import check_model, earlier_estimate

    model, _layer = check_model(config)
    layers = sweep_layers(model.n_layers)
    key = graph_key(graph)
    folders = {la: classifier_dir(config, model.probe_id, la, key) for la in layers}
    saved = [
        la
        for la, folder in folders.items()
        if all(probe_path(folder, c.synset).exists() for c in graph.concepts)
    ]
    shown = LayerPreview(rule, layers, saved, max_new_tokens=config.generation.max_new_tokens)
    if rule == "auto":
        return shown
    measured = selection_config(config)
    for la, folder in folders.items():
        chosen = choose_beta(measured, load_range(folder), folder, explicit).config
        shown.betas[la] = float(cast(float, chosen.steering.beta))
    shown.texts_per_layer = texts_per_layer(config, graph)
    tokens = shown.texts * shown.max_new_tokens
    estimate, shown.no_estimate = earlier_estimate(
        config.experiment, "5", model, tokens, config.steering.vector_source
    )
    if estimate is not None:
        shown.seconds = sum(estimate.scaled.get(k, 0.0) for k in EFFECT_STAGES)
    return shown


C = TypeVar("C", bound=RunConfig)


def resolve_layer(
    config: C,
    rule: int | str | None,
    say: Callable[[str], None],
    explicit: frozenset[str] = frozenset(),
) -> tuple[C, LoadedModel | None, SentenceTransformer | None, LayerChoice | None]:
    """(the config with its layer, the loaded model, the embedder, the
    :class:`~experiments.record.LayerChoice`; None for what was not needed): a rule
    (``auto``, ``auto-effect``) loads the model and picks the layer; a number or None
    leaves the config as it is and loads nothing. ``auto-effect`` also needs the embedder
    (``explicit``: the keys whose β the command line set, :func:`effect_layer`)."""
    if rule not in ("auto", "auto-effect"):
        return config, None, None, None
    from experiments.kernel.lifecycle import embedder_device, load_graph

    if rule == "auto-effect":
        selection_config(config)  # what it cannot measure is said before anything loads
    say(f"loading {config.model}")
    lm = config.model_spec.load()
    graph = load_graph(config)
    embedder = None
    started = time.perf_counter()
    if rule == "auto":
        chosen, sets = pick_layer(config, lm, graph, say=say)
        choice = auroc_choice(chosen, sets, time.perf_counter() - started)
    else:
        from metrics.embedder import load_embedder

        embedder = load_embedder(config.embedding.model, embedder_device(config, lm))
        choice = effect_layer(config, lm, graph, embedder, explicit=explicit, say=say)
    return config.model_copy(update={"layer": choice.layer}), lm, embedder, choice
