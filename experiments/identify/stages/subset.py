"""identify v2's stratified subset and name-free measures: the stages that cost a pass
per direction (so only a few concepts get them), and the columns they add to the
directions table. The study (``study.py``) calls them; the analysis of what they add is
``subset_analysis.subset_outcomes`` and ``identified_analysis``'s name-free block.

* :func:`choose_subset`: concepts stratified by v*'s test AUROC (``matched.py``);
* :func:`subset_likelihood`: the likelihood outcome at fixed and KL-matched doses
  (``outcome.score_dose``) and on name-free texts (``namefree.py``);
* :func:`generate_subset`: every direction of the subset generated from on the report
  prompts plus ``identify.subset_prompts`` (:func:`with_subset_prompts`);
* :func:`name_free_detection`: every direction's AUROC on name-free test positives;
* :func:`subset_columns`, :func:`name_free_columns`: their columns of ``directions.csv``
  (the outcomes' own columns come from their declarations, ``measures.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from experiments.concepts import load_concepts
from experiments.config import IdentifyStudyConfig
from experiments.rundir import RunDir

if TYPE_CHECKING:
    from experiments.concepts import ConceptGraph
    from experiments.identify.stages.data import DirectionSet, StudyData
    from experiments.identify.stages.detect import Detection
    from experiments.identify.stages.outcome import Steering
    from experiments.kernel.lifecycle import RunSession
    from experiments.likelihood_texts import LikelihoodTexts
    from experiments.timer import Timer
    from steering.models import LoadedModel


def choose_subset(
    config: IdentifyStudyConfig,
    detections: dict[tuple[str, str], Detection],
    concepts: list[str],
    run_dir: RunDir,
) -> list[str]:
    """``identify.subset_concepts`` concepts stratified by v*'s test AUROC (known before
    any outcome), written to the run folder."""
    from experiments.identify.stages.directions import REFERENCE
    from experiments.identify.stages.matched import stratified_subset

    subset = stratified_subset(
        {c: detections[(c, REFERENCE)].auroc for c in concepts},
        config.identify.subset_concepts,
        config.seed,
    )
    run_dir.write_json(RunDir.SUBSET, {"concepts": subset, "by": "v* test AUROC tertiles"})
    return subset


def subset_likelihood(
    steering: Steering, timer: Timer, texts: LikelihoodTexts, subset: list[str],
    outputs: dict[tuple[str, str], dict[str, np.ndarray]], prompts: dict[str, list[str]],
    say: Callable[[str], None], words: dict[str, list[str]] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:  # fmt: skip
    """The subset's likelihood records: (at fixed and KL-matched doses, on name-free texts);
    each resumes per concept from its run-folder file. ``words``: each concept's, whose
    tokens a concept-free dose leaves out (``identify.dose_kl``)."""
    from experiments.identify.stages.outcome import score_dose, score_likelihood

    lm, config, run_dir = steering.lm, steering.config, steering.run_dir
    ident = config.identify
    say(f"dose: the stratified subset {', '.join(subset)}, fixed and KL-matched doses")
    with timer.time("dose"):
        dose = score_dose(steering, texts, subset, outputs, prompts, say, words)
    name_free: list[dict[str, Any]] = []
    if subset and ident.name_free:
        from experiments.identify.stages.namefree import name_free_likelihood_texts
        from steering.likelihood import encode_texts

        free = name_free_likelihood_texts(
            load_concepts(config.concepts.file),
            subset,
            config.likelihood.texts,
            config.seed,
            length=lambda t: len(encode_texts(lm, [t], config.likelihood.prefix)[0].target),
            scorer=nll_scorer(lm, config.likelihood.prefix),
            keep=ident.name_free_keep,
        )
        run_dir.write_json(RunDir.NAME_FREE_TEXTS, free.to_dict())
        say(f"the likelihood outcome on name-free texts ({len(free.on)} concepts)")
        with timer.time("name_free"):
            name_free = score_likelihood(
                steering.only(c for c in subset if c in free.on), free, say,
                file=RunDir.NAME_FREE,
            )  # fmt: skip
    return dose, name_free


def generate_subset(
    session: RunSession[IdentifyStudyConfig],
    steering: Steering,
    subset: list[str],
    tags: list[str],
    on_batch: Callable[[int, int], None] | None,
    say: Callable[[str], None],
) -> list[str]:
    """Generate from every direction of the subset not among ``tags`` (generated for every
    concept already); returns those directions' ids."""
    from experiments.identify.stages.generation import generate_validation, vector_set

    config, layer, alpha = steering.config, steering.layer, steering.alpha
    betas, directions = steering.betas, steering.directions

    ids = (d.id for c in subset for d in directions.of(c))
    every = [t for t in dict.fromkeys(ids) if t not in tags]
    if subset and config.identify.subset_generate:
        say(f"generations for every direction of the subset ({len(every)} more directions)")
        for t in every:  # a direction some concept lacks (e.g. no "other") skips it
            having = [c for c in subset if directions.has(c, t)]
            generate_validation(
                session,
                with_subset_prompts(config),
                {t: vector_set(config, layer, alpha, directions.across(t, having))},
                betas,
                on_batch,
                graph=session.graph.select(synsets=having),
            )
    return every


def nll_scorer(lm: LoadedModel, prefix: str) -> Callable[[Sequence[str]], list[float]]:
    """The unsteered model's per-token NLL of each text after ``prefix``: what
    ``namefree.drop_worst`` ranks texts by."""
    from steering.likelihood import text_loglik

    return lambda texts: [-float(v) for v in text_loglik(lm, texts, prefix)]


def name_free_detection(
    config: IdentifyStudyConfig,
    graph: ConceptGraph,
    concepts: list[str],
    directions: DirectionSet,
    data: StudyData,
    embed: Callable[[list[str]], np.ndarray],
    scorer: Callable[[Sequence[str]], list[float]] | None = None,
) -> dict[tuple[str, str], float]:
    """Every direction's AUROC on name-free test positives (one more pass over the model,
    so the named texts' activations are those of a study without this); with a
    ``scorer`` (:func:`nll_scorer`), each concept's worst ``1 - identify.name_free_keep``
    of them dropped first."""
    from experiments.identify.stages.detect import name_free_auroc
    from experiments.identify.stages.namefree import drop_worst_each, name_free_positives

    n, keep = config.classifier.eval_per_class, config.identify.name_free_keep
    positives = {c: name_free_positives(graph.get(c), n, config.seed, keep) for c in concepts}
    if scorer is not None:
        positives = drop_worst_each(positives, scorer, keep, n)
    texts = sorted({t for ts in positives.values() for t in ts})
    features = np.asarray(embed(texts), dtype=np.float64) if texts else np.zeros((0, 0))
    row = {t: i for i, t in enumerate(texts)}
    return {
        (d.concept, d.id): name_free_auroc(
            d.array(),
            features[[row[t] for t in positives[d.concept]]],
            data.concepts[d.concept].test,
        )
        for d in directions
        if positives[d.concept]
    }


def with_subset_prompts(config: IdentifyStudyConfig) -> IdentifyStudyConfig:
    """The config the subset generates under: ``identify.subset_prompts`` appended to the
    report prompts, the selection prompts (the first ones) unchanged, so the rows the
    subset shares with the rest of the study keep their keys."""
    from experiments.kernel.plan import split_prompts

    extra = config.identify.subset_prompts
    if not extra:
        return config
    if config.generation.suppression_prompts:
        raise ValueError(
            "identify.subset_prompts cannot be combined with generation.suppression_prompts "
            "(they would shift the suppression prompts' indices): set one of them"
        )
    prompts = [*config.generation.prompts, *extra]
    n_select = len(split_prompts(len(config.generation.prompts), config)[0])
    selection = config.selection.model_copy(
        update={"selection_prompts": (n_select + 0.5) / len(prompts)}
    )
    generation = config.generation.model_copy(update={"prompts": prompts})
    return config.model_copy(update={"generation": generation, "selection": selection})


def subset_columns(
    frame: pd.DataFrame, dose: list[dict[str, Any]], generated: pd.DataFrame
) -> None:
    """Add the subset's outcomes to the directions table, in place (NaN off the subset):
    ``dose_effect_<label>`` (mean over pairs), the matched dose's multiplier, KL and
    whether it matched (``dose_kl_kind``: the KL it was matched on, when not the
    whole vocabulary's); where the dose was verified on held-apart prompts
    (``identify.dose_verify``), ``dose_verify_gap`` (|log KL − log v*'s KL| there) and
    ``dose_matched_verify`` (that gap within ``MATCH_TOLERANCE``); ``gen_gate`` (s = +1:
    whether the generated texts passed the gate; their Δ is a declared outcome,
    ``measures.py``)."""
    from experiments.identify.stages.matched import MATCH_TOLERANCE, MATCHED, log_gap, matched

    key = list(zip(frame["concept"], frame["direction"], strict=True))
    if dose:
        rows = pd.DataFrame(dose)
        means = rows.groupby(["dose", "concept", "direction"])["e"].mean()
        for label in sorted(rows["dose"].unique()):
            at = means.loc[label].to_dict()
            frame[f"dose_effect_{label}"] = [at.get(k, np.nan) for k in key]
        facts = rows[rows["dose"] == MATCHED].groupby(["concept", "direction"]).first()
        for column, source in (("dose_multiplier", "multiplier"), ("dose_kl", "kl")):
            at = facts[source].to_dict()
            frame[column] = [at.get(k, np.nan) for k in key]
        target = facts["kl_target"].to_dict()
        frame["dose_matched"] = [
            bool(matched(np.array([at_kl]), target[k])[0]) if k in target else np.nan
            for k, at_kl in zip(key, frame["dose_kl"], strict=True)
        ]
        if "kl_kind" in facts:  # the KL the dose was matched on (identify.dose_kl)
            kind = facts["kl_kind"].to_dict()
            frame["dose_kl_kind"] = [kind.get(k) for k in key]
        if "kl_verify" in facts:
            held = facts.dropna(subset=["kl_verify", "kl_verify_target"])
            gap = {
                k: float(log_gap(np.array([r["kl_verify"]]), r["kl_verify_target"])[0])
                for k, r in held.iterrows()
            }
            frame["dose_verify_gap"] = [gap.get(k, np.nan) for k in key]
            frame["dose_matched_verify"] = [
                bool(gap[k] <= MATCH_TOLERANCE) if k in gap else np.nan for k in key
            ]
    if len(generated):
        up = generated[generated["sign"] == 1].set_index(["concept", "direction"])
        at = up["gate"].to_dict()
        frame["gen_gate"] = [at.get(k, np.nan) for k in key]


def name_free_columns(frame: pd.DataFrame, auroc: dict[tuple[str, str], float]) -> None:
    """``auroc_name_free``: detection on name-free positives (every concept with some),
    in place. The subset's name-free outcome is declared in ``measures.py``."""
    key = list(zip(frame["concept"], frame["direction"], strict=True))
    if auroc:
        frame["auroc_name_free"] = [auroc.get(k, np.nan) for k in key]
