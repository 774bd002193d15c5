"""Phase 6: train probes along a training curve and measure how each probe set steers.

For every (layer, training size, probe seed, direction source) the Phase 4 stage trains
or reuses a probe set, the vectors stage turns it into steering vectors, and the
Phase 5 stages generate with them: β chosen per concept on the selection prompts, then
the report prompts at that β. Everything lands in one run folder. Rows that do not
depend on the probe set (the unsteered twins and the random-direction null at each β)
have the same keys for every probe set, so they are generated once and shared; an
interrupted study resumes from its folder like ``steer-eval run --resume``.

The β and held-out grid come from the model's recorded strength range per layer and
direction source (:func:`strength_choices`, the rules of ``choose_beta``), fixed in the
run folder when the study starts, so a resume steers as the start did.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar

import numpy as np
import pandas as pd

from experiments.config import CalibrationStudyConfig, ConfigError, Phase, RunConfig
from experiments.kernel.classifiers import ensure_classifiers
from experiments.kernel.effect import BetaChoice, above_null, paired_effects
from experiments.kernel.generate import generate
from experiments.kernel.lifecycle import RunSession
from experiments.kernel.plan import CONCEPT_ARM, build_plan
from experiments.kernel.probes import ProbeSet
from experiments.kernel.publisher import ChildRun, Views
from experiments.kernel.score import build_scorer, score_all
from experiments.kernel.selection import select_strengths
from experiments.kernel.study import Begun, Finished, Opening, Resume, config_params, run_study
from experiments.kernel.vectors import build_vectors, neutral_texts
from experiments.record import CalibrationRecord, CurveFit
from experiments.rows import finite, number
from experiments.rundir import RunDir, join_scores
from experiments.strength_range import BETA_TAG, choose_beta, shared_range
from experiments.tracking.context import MAX_TAG_LEN

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from steering.models import LoadedModel

log = logging.getLogger(__name__)
C = TypeVar("C", bound=RunConfig)
PHASE = "6"
# The stages a study times, in order (its record's timings; `calibrate --dry-run` lists them).
STAGES = ["model_load", "mlflow_open", "centroids", "classifiers", "vectors", "generation",
          "perplexity", "embedding", "figures", "views", "mlflow_parent", "child_runs"]  # fmt: skip


@dataclass(frozen=True)
class ProbeSetSpec:
    """One point of the curve: which probes, trained how, steering along which direction."""

    layer: int
    size: str
    seed: int
    source: str

    @property
    def tag(self) -> str:
        return f"L{self.layer}-{self.size}-s{self.seed}-{self.source}"


@dataclass
class CalibrationResult:
    run_id: str
    run_dir: Path
    curve: pd.DataFrame
    record: CalibrationRecord


def specs(config: CalibrationStudyConfig, layers: list[int]) -> list[ProbeSetSpec]:
    c = config.calibration
    return [
        ProbeSetSpec(layer, size, seed, source)
        for layer in layers
        for size in c.sizes
        for seed in c.probe_seeds
        for source in c.sources
    ]


def _probe_config(config: C, spec: ProbeSetSpec) -> C:
    """The Phase 4 config of one probe set: its size and seed (generation keeps its own)."""
    classifier = config.classifier.model_copy(update={"train": spec.size})
    return config.model_copy(update={"seed": spec.seed, "classifier": classifier})


def _source_config(config: C, source: str) -> C:
    steering = config.steering.model_copy(update={"vector_source": source})
    return config.model_copy(update={"steering": steering})


def _strength_key(layer: int, source: str) -> str:
    return f"L{layer}-{source}"


# One layer and source's β, held-out grid, where they came from and the sentence saying
# so (the run folder's strength.json; "from" is a keyword, hence the functional form).
StrengthChoice = TypedDict(
    "StrengthChoice",
    {"beta": float | Literal["auto"], "beta_grid": list[float], "from": str, "message": str},
)


def strength_choices(
    config: CalibrationStudyConfig,
    model_id: str,
    layers: list[int],
    explicit: frozenset[str] = frozenset(),
) -> dict[str, StrengthChoice]:
    """Per layer and direction source (``L6-classifier``), the β and held-out grid the
    study steers with and where they came from: the range recorded for ``model_id`` (a
    probe id) at that layer in any classifier set under ``classifier.dir``, by Phase 5's
    rules (``choose_beta``; ``explicit``, the keys set on the command line, are kept)."""
    out: dict[str, StrengthChoice] = {}
    for layer in layers:
        for source in config.calibration.sources:
            steered = _source_config(config, source)
            found, where = shared_range(
                Path(config.classifier.dir), model_id, layer, config.steering.mode, source
            )
            choice = choose_beta(steered, found, where, explicit)
            out[_strength_key(layer, source)] = {
                "beta": choice.config.steering.beta,
                "beta_grid": choice.config.selection.beta_grid,
                "from": choice.source,
                "message": choice.message,
            }
    return out


def _spec_config(config: C, spec: ProbeSetSpec, choices: dict[str, StrengthChoice]) -> C:
    """The config one probe set steers with: its source, and the β and grid chosen for
    its layer and source (the config's own where no choice was stored: a study begun
    before choices were)."""
    steered = _source_config(config, spec.source)
    chosen = choices.get(_strength_key(spec.layer, spec.source))
    if chosen is None:
        return steered
    steering = steered.steering.model_copy(update={"beta": chosen["beta"]})
    selection = steered.selection.model_copy(update={"beta_grid": chosen["beta_grid"]})
    return steered.model_copy(update={"steering": steering, "selection": selection})


def _beta_tag(choices: dict[str, StrengthChoice]) -> str:
    """The parent run's BETA_TAG: each layer and source's sentence, cut to the suite's tag
    length (``MAX_TAG_LEN``; the run folder's strength.json keeps them all)."""
    text = "; ".join(f"{key}: {c['message']}" for key, c in choices.items())
    if len(text) <= MAX_TAG_LEN:
        return text
    tail = f"... ({RunDir.STRENGTH} has all)"
    return text[: MAX_TAG_LEN - len(tail)] + tail


def probe_predictors(probes: ProbeSet, names: list[str]) -> dict[str, dict[str, float | None]]:
    """Per concept, the detection predictors the study compares (None when absent)."""
    out = {}
    for synset, probe in probes.probes.items():
        metrics = dict(probe.metrics)
        if "cos_probe_diffmean" not in metrics and probe.diffmean is not None:
            d = probe.direction()
            metrics["cos_probe_diffmean"] = float(
                d @ probe.diffmean / np.linalg.norm(probe.diffmean)
            )
        out[synset] = {
            name: (float(metrics[name]) if isinstance(metrics.get(name), int | float) else None)
            for name in names
        }
    return out


def effects_for(
    records: pd.DataFrame, tag: str, betas: dict[str, float], config: RunConfig
) -> pd.DataFrame:
    """Per concept and sign, the gated effect above null of one probe set's report rows,
    against the random directions at the β this probe set chose for the concept."""
    report = records[records["split"] == "report"]
    vectors = report["vectors"] if "vectors" in report.columns else pd.Series(None, report.index)
    mine = (report["arm"] == CONCEPT_ARM) & ((report["strength"] == 0) | (vectors == tag))
    chosen = report["concept"].map(betas)
    null = report["arm"].str.startswith("random:") & np.isclose(report["beta"], chosen)
    rows = report[mine | null]
    effects = paired_effects(rows, config)
    raw = effects[effects["arm"] == CONCEPT_ARM]
    out = []
    for (synset, sign), group in above_null(effects).groupby(["concept", "sign"]):
        mine_rows = raw[(raw["concept"] == synset) & (raw["sign"] == sign)]
        out.append(
            {
                "concept": synset,
                "sign": int(number(sign)),
                "above_null": float(group["above_null"].mean()),
                "effect": float(mine_rows["e_gated"].mean()),
                "gate_pass": float(mine_rows["gate_pass"].mean()),
                "n": len(group),
            }
        )
    return pd.DataFrame(out)


@dataclass(frozen=True)
class Curve:
    """What the calibration study's stages produce beside its record: the curve."""

    curve: pd.DataFrame


@dataclass(frozen=True)
class Steered:
    """What the calibration study steers with: its layers, checked against the model,
    and each probe set's β and where it came from."""

    layers: list[int]
    choices: dict[str, StrengthChoice]


class Calibration:
    """The calibration study, new or resumed (a :class:`~experiments.kernel.study.Study`)."""

    phase: Phase = "calibration"
    record_file: str = RunDir.ANALYSIS

    def __init__(
        self,
        on_batch: Callable[[int, int], None] | None = None,
        explicit: frozenset[str] = frozenset(),
    ) -> None:
        self.on_batch = on_batch
        self.explicit = explicit  # keys set on the command line: a range never replaces them

    def begin(self, session: RunSession[CalibrationStudyConfig]) -> Begun[Steered]:
        """The layers, checked against the model, and the β of each (a resumed study
        steers as it began: its ``strength.json``)."""
        config, lm = session.config, session.model
        cal = config.calibration
        layers = [lm.check_layer(x) for x in (cal.layers or [session.layer()])]
        tags = {"phase": PHASE}
        if session.existing:
            stored = session.directory.file(RunDir.STRENGTH)
            choices = json.loads(stored.read_text()) if stored.exists() else {}
        else:
            choices = strength_choices(config, lm.probe_id, layers, self.explicit)
            for key, chosen in choices.items():
                if chosen["from"] != "config" or "recorded range" in chosen["message"]:
                    session.say(f"{key}: {chosen['message']}")
            tags |= {BETA_TAG: _beta_tag(choices)} if choices else {}
        opening = Opening(
            f"phase6 {lm.model_id} L{','.join(map(str, layers))} "
            f"{len(cal.sizes)} sizes × {len(cal.sources)} sources × {len(cal.probe_seeds)} seeds",
            tags,
        )
        return Begun(opening, Steered(layers, choices))

    def started(
        self, session: RunSession[CalibrationStudyConfig], new: bool, steered: Steered
    ) -> dict[str, object]:
        if not session.existing:
            session.directory.write_json(RunDir.STRENGTH, steered.choices)
        return config_params(session.config)

    def stages(
        self, session: RunSession[CalibrationStudyConfig], steered: Steered
    ) -> Finished[CalibrationRecord, Curve]:
        from experiments.calibration.analysis import analyse_curve
        from steering.activations import residual_scale

        config, graph, timer, lm, say = (
            session.config, session.graph, session.timer, session.model, session.say,
        )  # fmt: skip
        cal, layers, run_dir = config.calibration, steered.layers, session.directory
        with timer.time("centroids"):
            scorer = build_scorer(config, graph, session.text_embedder)
        selections: dict[str, dict[str, BetaChoice]] = {}
        predictors: dict[str, dict[str, dict[str, float | None]]] = {}
        alphas: dict[int, float] = {}
        for i, spec in enumerate(specs(config, layers)):
            say(f"probe set {i + 1}: {spec.tag}")
            with timer.time("classifiers"):
                probes = ensure_classifiers(_probe_config(config, spec), lm, graph, spec.layer)
            if spec.layer not in alphas:
                alphas[spec.layer] = residual_scale(
                    lm, neutral_texts(graph, config.seed), spec.layer
                )
            source_config = _spec_config(config, spec, steered.choices)
            with timer.time("vectors"):
                vectors = build_vectors(
                    source_config, lm, graph, probes, spec.layer, alpha=alphas[spec.layer]
                )
            predictors[spec.tag] = probe_predictors(probes, cal.predictors)
            chosen, _ = select_strengths(
                session, source_config, vectors, scorer, self.on_batch, vectors_tag=spec.tag
            )
            selections[spec.tag] = chosen
            betas = {k: v["beta"] for k, v in chosen.items()}
            plan = build_plan(source_config, graph, vectors, "report", betas, vectors_tag=spec.tag)
            generate(session, plan, vectors, self.on_batch, config=source_config)
        session.close_executor()
        run_dir.write_json(RunDir.SELECTION, selections)
        run_dir.write_json(RunDir.PROBE_SETS, predictors)
        say("scoring every generation and fitting the curve")
        generations = run_dir.read_generations()
        with timer.time("embedding"):
            all_scores = score_all(scorer, generations)
        run_dir.write_scores(all_scores)
        records = pd.DataFrame(join_scores(generations, all_scores))
        curve = build_curve(records, specs(config, layers), predictors, selections, config)
        results = analyse_curve(curve, config)
        record = build_record(session.parent_id, config, lm.model_id, layers, predictors, results)
        return Finished(record, Curve(curve))

    def views(self, record: CalibrationRecord, products: Curve) -> Views:
        from experiments.calibration.publish import views

        return views(record, products.curve)

    def children(self, record: CalibrationRecord, products: Curve) -> list[ChildRun]:
        from experiments.calibration.publish import children

        return children(record, products.curve)


def run_calibration(
    config: CalibrationStudyConfig | None,
    lm: LoadedModel | None = None,
    embedder: SentenceTransformer | None = None,
    resume: str | None = None,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    explicit: frozenset[str] = frozenset(),
) -> CalibrationResult:
    """Run (or resume) the whole study and log it to the ``phase6-calibration`` experiment.

    It runs like every study (:func:`~experiments.kernel.study.run_study`): the parent
    run ends FINISHED, KILLED or FAILED, and rows are generated on
    ``execution.executor``. ``explicit``: the config keys set on the command line, which
    a recorded strength range never replaces (:func:`strength_choices`)."""
    if config is not None and not isinstance(config, CalibrationStudyConfig):
        raise ConfigError(f"calibrate takes a calibration config, not {config.phase!r}")
    ran = run_study(
        Calibration(on_batch, explicit),
        config,
        resume=Resume(resume) if resume else None,
        lm=lm,
        embedder=embedder,
        progress=progress,
    )
    return CalibrationResult(ran.run_id, ran.run_dir, ran.products.curve, ran.record)


def build_record(
    run_id: str,
    config: CalibrationStudyConfig,
    model_id: str,
    layers: list[int],
    predictors: dict[str, dict[str, dict[str, float | None]]],
    results: list[CurveFit],
) -> CalibrationRecord:
    """The study's record, from the stage outputs (a pure function)."""
    measured = {r.predictor for r in results}
    return CalibrationRecord(
        run_id=run_id,
        experiment=config.experiment,
        config=config,
        model_id=model_id,
        layers=layers,
        threshold=config.calibration.effect_threshold,
        main_predictor=next((p for p in config.calibration.predictors if p in measured), None),
        predictors={  # JSON has no NaN: a probe's undefined measure reads as missing
            tag: {c: {k: finite(v) for k, v in values.items()} for c, values in per.items()}
            for tag, per in predictors.items()
        },
        results=results,
    )


def build_curve(
    records: pd.DataFrame,
    all_specs: list[ProbeSetSpec],
    predictors: dict[str, dict[str, dict[str, float | None]]],
    selections: dict[str, dict[str, Any]],
    config: RunConfig,
) -> pd.DataFrame:
    """One row per (probe set, concept): predictors, chosen β and the effect above null."""
    rows = []
    for spec in all_specs:
        betas = {k: v["beta"] for k, v in selections.get(spec.tag, {}).items()}
        effects = effects_for(records, spec.tag, betas, config)
        for synset, preds in predictors[spec.tag].items():
            mine = effects[effects["concept"] == synset]
            by_sign = {int(r["sign"]): r for _, r in mine.iterrows()}
            pos, neg = by_sign.get(1), by_sign.get(-1)
            signs = [r for r in (pos, neg) if r is not None]
            values = [r["above_null"] for r in signs]
            rows.append(
                {
                    "tag": spec.tag,
                    "layer": spec.layer,
                    "size": spec.size,
                    "n_train": sum(int(x) for x in spec.size.split("x")),
                    "seed": spec.seed,
                    "source": spec.source,
                    "concept": synset,
                    **preds,
                    "beta": betas.get(synset),
                    "effect_above_null_pos": None if pos is None else pos["above_null"],
                    "effect_above_null_neg": None if neg is None else neg["above_null"],
                    "effect_above_null": float(np.mean(values)) if values else None,
                    "gate_pass": float(np.mean([r["gate_pass"] for r in signs])) if signs else None,
                }
            )
    return pd.DataFrame(rows)
