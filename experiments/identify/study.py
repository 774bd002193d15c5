"""``steer-eval identify``: vary detection quality on its own and measure what it does to
steering.

It runs like every study (:func:`~experiments.kernel.study.run_study`: parent run
FINISHED, KILLED or FAILED; rows generated on ``execution.executor``) in the ``phase6-identify``
experiment, on the development concepts by default (``--heldout``: the held-out ones,
once per pre-registration). Stages, each timed:

1. ``activations``: every probe, test, validation and neutral text at the layer, once;
2. ``directions``: v* and every manipulated direction (``identify/stages/data.py``);
3. ``detection``: each direction scored as its own detector (``detect.py``);
4. ``selection``: the held-out β of v* per concept, by generation (``generation.py``);
5. ``likelihood``: the likelihood outcome of every direction at that β, and the
   prompting baseline on the same texts (``outcome.py``);
6. ``readout``: the logit-lens gain and the next-token KL of every direction;
7. ``validation``: generations for the validating subset, scored by Δ;
8. ``analysis``, then publishing (``tabulate.py``, ``analysis.py``, ``crosscheck.py``,
   ``phase6.py``, ``publish.py``).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from experiments import tracking
from experiments.concepts import load_concepts
from experiments.config import ConfigError, IdentifyStudyConfig, Phase
from experiments.identify.heldout.prereg import (
    Preregistration,
    PreregistrationError,
    binding,
    check_binding,
    check_heldout,
    check_listed,
    check_resume,
    ledger_entry,
    load_preregistration,
    record_heldout,
    run_ledger,
    split_concepts,
)
from experiments.identify.heldout.shards import (
    committed_ledgers,
    device_of,
    keep_ledger,
    keep_shard,
    reliability_sums,
    shard_concepts,
)
from experiments.identify.pipeline import Directions, directions
from experiments.identify.pipeline import outcomes as stage_outcomes
from experiments.identify.tabulate import Analysed, analyse_study
from experiments.kernel.lifecycle import RunSession
from experiments.kernel.publisher import ChildRun, Views
from experiments.kernel.study import (
    Begun,
    Finished,
    Opening,
    Resume,
    config_params,
    run_study,
)
from experiments.record import IdentifyRecord
from experiments.record.pooled import ExploratoryRecord, PooledRecord
from experiments.rundir import RunDir, atomic_write_text
from experiments.strength_range import BETA_TAG, range_warning, shared_range

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from experiments.identify.estimation.cells import StudyTables
    from steering.models import LoadedModel

PHASE = "6-identify"
# The stages a study times, in order (its record's timings; `identify --dry-run` lists them).
STAGES = ["model_load", "activations", "likelihood_texts", "directions", "detection",
          "centroids", "generation", "perplexity", "embedding", "likelihood", "readout",
          "dose", "name_free", "analysis", "figures", "views", "mlflow_parent",
          "child_runs"]  # fmt: skip


@dataclass
class IdentifyResult:
    run_id: str
    run_dir: Path
    record: IdentifyRecord
    directions: pd.DataFrame


def concept_sets(config: IdentifyStudyConfig) -> dict[str, list[str]]:
    """The development and held-out concepts of the concept file (all of it)."""
    full = load_concepts(config.concepts.file)
    ident = config.identify
    dev, held = split_concepts(
        [c.synset for c in full.concepts], ident.heldout_fraction, ident.split_seed
    )
    return {"development": dev, "heldout": held}


def with_concepts(
    config: IdentifyStudyConfig,
) -> tuple[IdentifyStudyConfig, dict[str, list[str]]]:
    """The config restricted to its concept set (``identify.offset``: from the N+1th;
    ``identify.limit``: the first N;
    ``identify.shard``: that shard of the held-out set, ``identify/heldout/shards.py``)."""
    sets = concept_sets(config)
    ident = config.identify
    if ident.concept_set == "listed":
        chosen = list(config.concepts.synsets or [])
        if not chosen:
            raise ConfigError(
                "identify.concept_set: listed runs exactly concepts.synsets, and it names none: "
                "list the concepts under concepts.synsets"
            )
        unknown = sorted(set(chosen) - {*sets["development"], *sets["heldout"]})
        if unknown:
            raise ConfigError(
                f"concepts.synsets: {', '.join(unknown[:3])} not in {config.concepts.file}"
            )
    else:
        chosen = sets[ident.concept_set]
    chosen = chosen[ident.offset :]
    if ident.limit:
        chosen = chosen[: ident.limit]
    if ident.shard is not None:
        assert ident.shard_size is not None  # IdentifyConfig checks it
        try:
            chosen = shard_concepts(chosen, ident.shard_size, ident.shard)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    concepts = config.concepts.model_copy(update={"synsets": chosen, "limit": None})
    return config.model_copy(update={"concepts": concepts}), sets


def peak_memory() -> dict[str, float]:
    """Peak resident memory of this process (and of the card, on CUDA), MiB."""
    out = {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    import torch

    if torch.cuda.is_available():
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def run_identify(
    config: IdentifyStudyConfig,
    lm: LoadedModel | None = None,
    embedder: SentenceTransformer | None = None,
    resume: str | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[int, int], None] | None = None,
) -> IdentifyResult:
    """Run (or resume) the identification study; see the module docstring."""
    started = time.perf_counter()
    say = progress or (lambda _m: None)
    sets: dict[str, list[str]] = {}
    prereg = None
    forced = False
    bound: dict[str, str] | None = None  # the binding a held-out run was checked against
    if resume is None:
        if not isinstance(config, IdentifyStudyConfig):  # before its identify section is read
            raise ConfigError(f"identify takes an identify config, not {config.phase!r}")
        as_given = config  # what the pre-registration binds (before the set's concepts)
        config, sets = with_concepts(config)
        try:
            prereg = load_preregistration(config.identify.preregistration)
        except PreregistrationError:
            if config.identify.concept_set == "heldout":
                raise
        if config.identify.concept_set == "listed":
            check_listed(prereg, config, sets["heldout"])
        if config.identify.concept_set == "heldout":
            assert prereg is not None
            earlier = check_heldout(
                prereg, config.experiment, config.results_dir, force, config=as_given,
                scope=config.identify.shard, ledgers=committed_ledgers(config),
            )  # fmt: skip
            forced, bound = bool(earlier), binding(prereg, as_given)
    else:
        config, prereg, forced, bound = resumed(resume)
        sets = concept_sets(config)
    study = Identify(sets, prereg, forced, bound, on_batch, started)
    try:
        ran = run_study(
            study,
            config,
            resume=Resume(resume) if resume else None,
            lm=lm,
            embedder=embedder,
            progress=say,
        )
    except BaseException:  # an aborted shard leaves its ledger lines where they are kept
        shard = config.identify.shard if config.identify.concept_set == "heldout" else None
        if shard is not None and study.run_id is not None:
            kept = keep_ledger(config, study.run_id, shard)
            say(f"shard {shard} stopped; its ledger lines kept in {kept}: commit them")
        raise
    record = ran.record
    if record.concept_set == "heldout":  # the ledger: scored once, after publishing
        tracking.client().set_tag(ran.run_id, "identify.scored", "true")
        shard = record.config.identify.shard
        record_heldout(
            record.config.results_dir,
            ledger_entry(
                ran.run_id, study.prereg, forced, "scored",
                primary=record.primary.verdict if record.primary else None,
                shard=shard, device=ran.products.device,
            ),
        )  # fmt: skip
        if shard is not None:  # its table and ledger lines where the next window finds them
            kept = keep_shard(
                record.config, ran.run_id, ran.run_dir, shard,
                list(record.config.concepts.synsets or []), record.outcome_reliability,
                reliability_sums(ran.products.tables),
            )  # fmt: skip
            say(f"shard {shard} kept in {kept}: commit it")
    return IdentifyResult(ran.run_id, ran.run_dir, record, ran.products.tables.directions)


def pool_heldout(config: IdentifyStudyConfig, force: bool = False) -> PooledRecord:
    """``identify pool``: the primary scored once on the pooled held-out shards, after
    the checks of a held-out run, as a run of the study's experiment opened by the kernel
    (``identify/pooled.py``); the record as written beside the shards."""
    from experiments.identify.pooled import PooledStudy

    ident = config.identify.model_copy(update={"concept_set": "heldout", "shard": None})
    config = config.model_copy(update={"identify": ident})
    if ident.shard_size is None:
        raise PreregistrationError(
            f"{config.name} has no identify.shard_size: only a sharded held-out set is pooled"
        )
    prereg = load_preregistration(config.identify.preregistration)
    check_binding(prereg, config)  # names a missing binding before it is read
    held = list(with_concepts(config)[0].concepts.synsets or [])  # identify.limit applied
    study = PooledStudy(held, prereg, binding(prereg, config), force)
    return run_study(study, config, need_model=False, need_embedder=False).record


def pool_exploratory(config: IdentifyStudyConfig) -> ExploratoryRecord:
    """``identify pool --exploratory``: every estimand on the pooled held-out shards,
    after the pooled primary was scored, as a run the kernel opens (``identify/pooled.py``,
    ``identify/pooled_exploratory.py``)."""
    from experiments.identify.pooled import ExploratoryStudy

    ident = config.identify.model_copy(update={"concept_set": "heldout", "shard": None})
    config = config.model_copy(update={"identify": ident})
    prereg = load_preregistration(config.identify.preregistration)
    held = list(with_concepts(config)[0].concepts.synsets or [])  # identify.limit applied
    study = ExploratoryStudy(held, prereg)
    return run_study(study, config, need_model=False, need_embedder=False).record


def resumed(
    run_id: str,
) -> tuple[IdentifyStudyConfig, Preregistration | None, bool, dict[str, str] | None]:
    """A run to resume, before anything is loaded: its stored config, its
    pre-registration, whether it was a forced scoring, and for a held-out run the binding
    checked again as for a new run (:func:`~experiments.identify.heldout.prereg.check_resume`:
    the file it started under, committed unchanged; the config's hash, the code since
    ``code_commit``, the strength), which refuses a resume on anything changed. Whether it
    was forced, and the pre-registration it started under, come from its ``started``
    entry in the local ledger (else from its tags)."""
    from experiments.kernel.lifecycle import scoring_config

    run = tracking.get_run(run_id)
    stored = scoring_config(RunDir.locate(run), [], "resume", "identify")
    if not isinstance(stored, IdentifyStudyConfig):
        raise ConfigError(f"identify takes an identify config, not {stored.phase!r}")
    if stored.identify.concept_set != "heldout":
        try:
            return stored, load_preregistration(stored.identify.preregistration), False, None
        except PreregistrationError:
            return stored, None, False, None
    try:
        prereg = load_preregistration(stored.identify.preregistration)
    except PreregistrationError as exc:
        raise PreregistrationError(f"cannot resume held-out run {run_id}: {exc}") from None
    began = [e for e in run_ledger(stored.results_dir, run_id) if e.get("status") == "started"]
    tags = run.data.tags
    kept = began[0].get("prereg_sha256") if began else tags.get("identify.prereg_sha256")
    sha = kept if isinstance(kept, str) else None
    forced = bool(began[0].get("forced")) if began else tags.get("identify.forced") == "true"
    return stored, prereg, forced, check_resume(prereg, stored, run_id, sha)


@dataclass(frozen=True)
class Shown:
    """What identify's stages produce beside its record, for its views and child runs."""

    tables: StudyTables
    generated: pd.DataFrame  # the validating subset's generated cells
    phase6: pd.DataFrame | None  # the Phase 6 cross-check's frame, when it ran
    device: str  # where the model computed (``cpu/float32``): the scored ledger entry's


class Identify:
    """The identification study, new or resumed (a :class:`~experiments.kernel.study.Study`)."""

    phase: Phase = "identify"
    record_file: str = RunDir.ANALYSIS

    def __init__(
        self,
        sets: dict[str, list[str]],
        prereg: Preregistration | None,
        forced: bool,
        bound: dict[str, str] | None,
        on_batch: Callable[[int, int], None] | None,
        started: float,
    ) -> None:
        """``forced``: a held-out scoring after an earlier one (not confirmatory);
        ``bound``: the binding a held-out run was checked against, new or resumed."""
        self.sets, self.prereg, self.forced, self.bound = sets, prereg, forced, bound
        self.on_batch, self.started_at = on_batch, started
        self.run_id: str | None = None  # once the run is open: an aborted shard's ledger

    def begin(self, session: RunSession[IdentifyStudyConfig]) -> Begun[str]:
        """The parent run's name and its tags (what its inference is worth), and where
        the model computes (``cpu/float32``: every ledger entry says it)."""
        config, lm = session.config, session.model
        ident, prereg, forced = config.identify, self.prereg, self.forced
        concepts = [c.synset for c in session.graph.concepts]
        layer = session.layer()
        heldout = ident.concept_set == "heldout"
        note = range_note(config, lm.probe_id, layer)
        if note:
            session.say(note)
        opening = Opening(
            f"identify {ident.concept_set} {lm.model_id} L{layer} {len(concepts)} concepts",
            {
                "phase": PHASE,
                "identify.concept_set": ident.concept_set,
                "identify.label": "confirmatory (primary analysis only)"
                if heldout and not forced
                else "exploratory",
                **({"identify.prereg_sha256": prereg.sha256} if prereg else {}),
                **({"identify.forced": "true"} if heldout and forced else {}),
                **({"identify.shard": str(ident.shard)} if ident.shard is not None else {}),
                **({BETA_TAG: note} if note else {}),
            },
        )
        return Begun(opening, device_of(lm))

    def started(
        self, session: RunSession[IdentifyStudyConfig], new: bool, device: str
    ) -> dict[str, object]:
        """The concept split and the pre-registration in the folder; the held-out
        ledger's intent to score, before the first held-out cell (``resumed`` on a
        resume, whose checks passed again), mirrored to the run."""
        config, run_dir = session.config, session.directory
        ident, prereg = config.identify, self.prereg
        concepts = [c.synset for c in session.graph.concepts]
        run_dir.write_json(
            RunDir.CONCEPT_SPLIT, {**self.sets, "this_run": ident.concept_set, "concepts": concepts}
        )
        if prereg is not None:
            atomic_write_text(run_dir.file(RunDir.PREREGISTRATION), prereg.path.read_text())
        self.run_id = session.run_id
        if ident.concept_set == "heldout":
            record_heldout(
                config.results_dir,
                ledger_entry(
                    session.parent_id, prereg, self.forced, "started" if new else "resumed",
                    binding=self.bound, shard=ident.shard, device=device,
                ),
            )  # fmt: skip
        return config_params(config)

    def stages(
        self, session: RunSession[IdentifyStudyConfig], device: str
    ) -> Finished[IdentifyRecord, Shown]:
        from experiments.kernel.score import build_scorer

        config, timer, say = session.config, session.timer, session.say
        heldout = config.identify.concept_set == "heldout"
        found = directions(session, config, say)
        with timer.time("centroids"):
            scorer = build_scorer(config, session.graph, session.text_embedder)
        outcomes = stage_outcomes(session, config, found, scorer, self.on_batch, say)
        say("the analysis")
        with timer.time("analysis"):
            analysed = analyse_study(session, config, found, outcomes, self.prereg, say)
        timings = dict(timer.stages)
        timings["total"] = time.perf_counter() - self.started_at
        record = build_record(
            session.parent_id,
            config,
            session.model.model_id,
            found,
            outcomes.betas,
            analysed,
            label(heldout, self.forced, config.identify.concept_set),
            {"wall_seconds": timings["total"], **peak_memory()},
            timings,
        )
        shown = Shown(analysed.tables, outcomes.generated, analysed.phase6_frame, device)
        return Finished(record, shown)

    def views(self, record: IdentifyRecord, shown: Shown) -> Views:
        from experiments.identify.publish import views

        return views(record, shown.tables, shown.generated, shown.phase6)

    def children(self, record: IdentifyRecord, shown: Shown) -> list[ChildRun]:
        from experiments.identify.publish import children

        return children(record, shown.tables)


def range_note(config: IdentifyStudyConfig, model_id: str, layer: int) -> str | None:
    """A warning when the study's β grid leaves the model's recorded strength range.
    identify steers with its config as given: its pre-registration binds the grid, so
    a range recorded later must not move it; the researcher sets it (the sentence says
    how)."""
    steering = config.steering
    root = Path(config.classifier.dir)
    try:
        found, where = shared_range(root, model_id, layer, steering.mode, steering.vector_source)
    except ConfigError as exc:  # sweeps that disagree: worth saying, not worth stopping
        return str(exc)
    return range_warning(config, found, where)


def label(heldout: bool, scored_before: bool, concept_set: str = "development") -> str:
    """What the run's inference is worth: the pre-registered test once, else exploratory
    (on development concepts, or on the concepts a listed run names)."""
    if heldout and not scored_before:
        return "confirmatory: the primary analysis on held-out concepts, first scoring"
    if heldout:
        return "forced re-scoring of held-out concepts: not confirmatory"
    if concept_set == "listed":
        return "exploratory: listed concepts (concepts.synsets)"
    return "exploratory: development concepts"


def build_record(
    run_id: str,
    config: IdentifyStudyConfig,
    model_id: str,
    found: Directions,
    betas: dict[str, float],
    analysed: Analysed,
    label: str,
    resources: dict[str, float],
    timings: dict[str, float],
) -> IdentifyRecord:
    """The study's record, from the stage outputs (a pure function: the prompting
    baseline's interval is a seeded bootstrap over concepts): where it steered
    (``found``: the layer and α; each concept's β) and what the analysis found."""
    from metrics.intervals import bootstrap_statistic

    analysis, prereg = analysed.analysis, analysed.prereg
    per_concept = analysis.baseline.per_concept
    interval = None
    if per_concept:
        interval = bootstrap_statistic(
            list(per_concept.values()),
            lambda units: float(np.mean(units)) if units else None,
            confidence=config.criteria.confidence,
            n_boot=config.criteria.n_boot,
            seed=config.seed,
            method="concepts",
        )
        interval = replace(interval, n_clusters=len(per_concept))
    return IdentifyRecord(
        run_id=run_id,
        experiment=config.experiment,
        config=config,
        model_id=model_id,
        timings=timings,
        layer=found.layer,
        alpha=found.alpha,
        betas=betas,
        concept_set=config.identify.concept_set,
        label=label,
        preregistration=prereg.to_dict() if prereg else None,
        outcome=analysis.outcome,
        manipulations=analysis.manipulations,
        pooled=analysis.pooled,
        baseline=analysis.baseline.model_copy(update={"interval": interval}),
        primary=analysis.primary,
        identified=analysis.identified,
        estimands=analysis.estimands,
        outcome_reliability=analysis.outcome_reliability,
        between_concepts=analysed.between,
        validation=analysed.validation,
        phase6=analysed.phase6,
        resources={k: float(v) for k, v in resources.items()},
    )
