"""The Phase 6 training curve, re-analysed from a saved run (no regeneration).

The landed Phase 6 analysis fitted ``effect ~ predictor + (1 | concept)`` over training
sizes, which mixes within- and between-concept variation and has no size term, while
moving along the curve changes the templates covered, the noise of the estimate and
the effective regularisation. Here, from the run's saved generations, scores,
selections and probe sets:

* the effect above null per (probe set, concept) is rebuilt from the saved texts
  (``calibration.study.build_curve``: the same numbers as its ``curve.csv``);
* every direction is scored **as its own detector** (the diffmean source gets the
  diffmean direction's AUROC, AP and calibrated F1, not the logistic probe's), on the
  run's own validation and test splits of its ``seed`` — one fixed test split for every
  probe seed, where Phase 6 scored each probe seed on its own split — with
  cos(direction, v*), v* the diffmean at the largest size;
* the decomposition ``effect ~ x_within + x_between + log n_train + (1 + x_within |
  concept)`` (statsmodels MixedLM, random slopes) per source, predictor and sign, with a
  concept-bootstrap interval for the within-concept slope beside log n_train.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.calibration.analysis import EFFECTS
from experiments.calibration.study import ProbeSetSpec, build_curve
from experiments.identify.estimation import stats
from experiments.identify.estimation.cells import INPUT_PREDICTORS
from experiments.identify.stages.detect import score_direction
from experiments.kernel.lifecycle import load_graph
from experiments.kernel.probes import build_probe_texts, load_classifiers
from experiments.record import Phase6Fit, Phase6Reanalysis
from experiments.rows import number as real
from experiments.rundir import RunDir
from steering.activations import pooled_activations
from steering.directions import DirectionContext, get_direction_source

if TYPE_CHECKING:
    from steering.models import LoadedModel

PREDICTORS = INPUT_PREDICTORS  # the identify tables' own list (cells.py)


def locate(source: str, results_dir: str | None = None) -> RunDir:
    """A Phase 6 run folder from its path or its MLflow run id."""
    path = Path(source)
    if path.is_dir():
        return RunDir(path.parent, path.name)
    return RunDir.locate(tracking.get_run(source), results_dir)


def parse_tag(tag: str) -> ProbeSetSpec:
    """``L9-2x2x2-s0-diffmean`` -> ProbeSetSpec(9, "2x2x2", 0, "diffmean")."""
    layer, size, seed, source = tag.split("-", 3)
    return ProbeSetSpec(int(layer[1:]), size, int(seed[1:]), source)


def rescore_curve(
    run_dir: RunDir, lm: LoadedModel, progress: Callable[[str], None] = lambda _m: None
) -> pd.DataFrame:
    """The run's curve rows with every direction re-scored as its own detector."""
    config = run_dir.load_config("calibration")
    graph = load_graph(config)
    selections = json.loads(run_dir.file(RunDir.SELECTION).read_text())
    predictors = json.loads(run_dir.file(RunDir.PROBE_SETS).read_text())
    specs = [parse_tag(t) for t in predictors]
    records = pd.DataFrame(run_dir.read_scored(in_plan_order=True))
    curve = build_curve(records, specs, predictors, selections, config)
    texts = build_probe_texts(config, graph)  # the run's seed: one fixed split
    scored: dict[tuple[str, str], dict[str, Any]] = {}
    features: dict[int, tuple[dict[str, int], np.ndarray]] = {}
    largest = max({s.size for s in specs}, key=lambda s: sum(int(x) for x in s.split("x")))
    references: dict[int, dict[str, np.ndarray]] = {}
    for spec in specs:
        if spec.layer not in features:
            progress(f"phase 6 re-analysis: activations at layer {spec.layer}")
            eval_texts = sorted(
                {e.text for s in (texts.validation, texts.test) for v in s.values() for e in v}
            )
            acts = pooled_activations(lm, eval_texts, spec.layer).numpy()
            features[spec.layer] = ({t: i for i, t in enumerate(eval_texts)}, acts)
        probe_config = config.model_copy(
            update={
                "seed": spec.seed,
                "classifier": config.classifier.model_copy(update={"train": spec.size}),
            }
        )
        probes = load_classifiers(probe_config, graph, lm.probe_id, spec.layer)
        source = get_direction_source(spec.source)
        context = DirectionContext(format_axis=probes.format_axis)
        row, acts = features[spec.layer]
        for concept, probe in probes.probes.items():
            direction = np.asarray(source(probe, context), dtype=np.float64)
            direction = direction / np.linalg.norm(direction)

            def split(
                name: str,
                concept: str = concept,
                acts: np.ndarray = acts,
                row: dict[str, int] = row,
            ) -> tuple[np.ndarray, np.ndarray]:
                examples = getattr(texts, name)[concept]
                return acts[[row[e.text] for e in examples]], np.array([e.label for e in examples])

            det = score_direction(direction, split("test"), split("validation"))
            scored[(spec.tag, concept)] = {**det.metrics(), "_direction": direction}
            if spec.size == largest and probe.diffmean is not None:
                references.setdefault(spec.layer, {}).setdefault(
                    concept, np.asarray(probe.diffmean) / np.linalg.norm(probe.diffmean)
                )
    rows = []
    for _, r in curve.iterrows():
        s = scored.get((r["tag"], r["concept"]))
        if s is None:
            continue
        ref = references.get(int(r["layer"]), {}).get(r["concept"])
        rows.append(
            {
                **{
                    k: r[k]
                    for k in ("tag", "layer", "size", "n_train", "seed", "source", "concept")
                },
                **{k: v for k, v in s.items() if not k.startswith("_")},
                "cos_ref": float(s["_direction"] @ ref) if ref is not None else np.nan,
                **{column: r.get(column) for column in EFFECTS.values()},
            }
        )
    return pd.DataFrame(rows)


def decompose(frame: pd.DataFrame, n_boot: int, seed: int) -> list[Phase6Fit]:
    """The within/between mixed model per (source, predictor, sign)."""
    out = []
    for (layer, source), part in frame.groupby(["layer", "source"], sort=True):
        part = part.assign(log_n=np.log(part["n_train"].astype(float)))
        for predictor in PREDICTORS:
            if part[predictor].isna().all():
                continue
            for sign, effect in EFFECTS.items():
                if effect not in part or part[effect].isna().all():
                    continue
                data = part.assign(y=part[effect].astype(float))
                mixed = stats.within_between(data, "y", predictor)
                fe = stats.fe_coefficients(
                    data, "y", [predictor, "log_n"], n_boot=n_boot, seed=seed
                )
                out.append(
                    Phase6Fit(
                        layer=int(real(layer)),
                        source=str(source),
                        predictor=predictor,
                        sign=sign,
                        mixed=mixed,
                        within_slope_given_log_n=fe[predictor],
                    )
                )
    return out


def reanalyse(
    source: str,
    lm: LoadedModel,
    n_boot: int,
    seed: int,
    progress: Callable[[str], None] = lambda _m: None,
) -> tuple[pd.DataFrame, Phase6Reanalysis]:
    run_dir = locate(source)
    frame = rescore_curve(run_dir, lm, progress)
    fits = decompose(frame, n_boot, seed)
    return frame, Phase6Reanalysis(run=run_dir.run_id, run_dir=str(run_dir.path), fits=fits)
