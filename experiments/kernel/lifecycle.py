"""One lifecycle for every command that makes or remakes a run.

``steer-eval run``, ``rescore``, ``calibrate`` and the bench's workload all open a run
the same way (Inspect AI's recorder lifecycle is the model):

1. resolve it: a new run from its config, or an existing one from its id, whose stored
   config comes back with the overrides a resume or rescore may apply
   (:func:`scoring_config`);
2. load what it needs: the language model (unless only saved texts are read), the
   embedder and the concept graph, timed as ``model_load``;
3. open the parent MLflow run when the caller starts it (:meth:`RunSession.start`):
   created, or reopened for a resume or rescore, through ``tracking.tracked_run``,
   which ends it FINISHED, KILLED on Ctrl-C and FAILED on any other error, so an
   interrupted run is told apart from a broken one; the run folder is made (and its
   path remembered on the run);
4. the executor that generates rows (``execution.executor``), made on first use and
   closed when the block ends.

Nothing here knows what a phase computes: the one runner (``kernel/study.run_study``)
opens every study through it and the studies compose their stages inside the block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

from experiments import tracking
from experiments.concepts import ConceptGraph, load_concepts
from experiments.config import ConfigError, ExecutionConfig, Phase, RunConfig
from experiments.execution import Executor, make_executor
from experiments.rundir import RUN_DIR_TAG, RunDir
from experiments.timer import Timer
from experiments.tracking.context import (
    DECODE_TAG,
    DEVICE_TAG,
    MODEL_TAG,
    REOPENED_TAG,
    THREADS_FROM_TAG,
    THREADS_TAG,
    WAIT_POLICY_TAG,
    load_tags,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from steering.models import LoadedModel
    from steering.platform import ThreadChoice

# Sections a rescore may change: they act on saved texts, not on what was generated.
RESCORE_SECTIONS = ("metrics", "gate", "criteria", "centroids", "embedding")
# A resume may also turn traces on or off: where results are logged, not what they are.
RESUME_KEYS = (*RESCORE_SECTIONS, "tracking.traces")

Action = Literal["resume", "rescore"]
# The config model of a session's phase (Phase5Config, CalibrationStudyConfig, ...).
C = TypeVar("C", bound=RunConfig)


@dataclass(frozen=True)
class Resume:
    """An existing run to reopen: resumed (its stored config, resume overrides), or
    rescored (``action="rescore"``: only scoring may change, no model is loaded)."""

    run_id: str
    action: Action = "resume"
    overrides: tuple[str, ...] = ()

    @property
    def changes_config(self) -> bool:
        """Whether the stored ``config.yaml`` is written again: by a resume only. A
        rescore keeps the config the run was made with; its own goes beside it
        (``config.rescored.yaml``, written by the rescoring study)."""
        return self.action == "resume"


class RunError(RuntimeError):
    """A run cannot start, resume or rescore; the message says why and what to do."""


def scoring_config(
    run_dir: RunDir, overrides: list[str], action: Action = "rescore", phase: Phase | None = None
) -> RunConfig:
    """The run's stored config with ``overrides`` applied, refusing any that would change
    what was (or is still to be) generated: a rescore or a resume may only change how
    saved texts are scored and judged. ``phase``: the phase of the command, how a stored
    config of before ``phase:`` is read (Phase 5 when None)."""
    from experiments.config import load_config, parse_override

    allowed = RESCORE_SECTIONS if action == "rescore" else RESUME_KEYS
    for text in overrides:
        path, _ = parse_override(text)
        dotted = ".".join(path)
        if not any(dotted == key or dotted.startswith(f"{key}.") for key in allowed):
            raise ConfigError(
                f"{action} cannot change {dotted}: it changes what was generated; start a "
                f"new run instead ({action} may change {', '.join(allowed)})"
            )
    run_dir.load_config(phase)  # a clear error when the folder is missing
    # a rescore goes on from the last rescore's changes; a resume from the run's own
    stored = run_dir.scoring_config_file() if action == "rescore" else run_dir.file(RunDir.CONFIG)
    return load_config(stored, overrides, phase)


def load_graph(config: RunConfig) -> ConceptGraph:
    return load_concepts(
        config.concepts.file, limit=config.concepts.limit, synsets=config.concepts.synsets
    )


@dataclass
class RunSession(Generic[C]):
    """What a run's stages share: its config (typed by its phase's model), graph,
    models, timer, folder and executor."""

    config: C
    graph: ConceptGraph
    timer: Timer
    lm: LoadedModel | None  # None when only saved texts are read (a rescore)
    embedder: SentenceTransformer | None  # None when nothing is scored by embedding
    existing: str | None = None  # the run being resumed or rescored
    run_dir: RunDir | None = None
    run_id: str | None = None
    say: Callable[[str], None] = field(default=lambda _msg: None)
    # torch's thread count and why; None: no model, or one handed in by the caller
    threads: ThreadChoice | None = None
    _stack: ExitStack = field(default_factory=ExitStack)
    _executor: Executor | None = None

    @property
    def model(self) -> LoadedModel:
        """The loaded model, for stages that generate or read activations."""
        if self.lm is None:
            raise RunError("this session loaded no model: a rescore reads saved texts")
        return self.lm

    @property
    def text_embedder(self) -> SentenceTransformer:
        """The embedder, for stages that score texts by embedding."""
        if self.embedder is None:
            raise RunError("this session loaded no embedder (need_embedder=False)")
        return self.embedder

    def layer(self) -> int:
        """The decoder layer the run probes and steers (``layer`` or the middle one)."""
        lm = self.model
        return lm.check_layer(
            self.config.layer if self.config.layer is not None else lm.default_layer
        )

    def start(
        self,
        experiment: str,
        name: str,
        results_root: str | Path,
        tags: dict[str, str] | None = None,
    ) -> tuple[str, bool]:
        """Open the parent run (new, or the one being resumed or rescored) until the
        session ends, and make its folder. Returns (run id, whether it is new)."""
        new = self.existing is None
        if new and self.lm is not None:  # what a dry run matches earlier runs by
            from steering.policies import decode_description

            tags = {
                **(tags or {}),
                DEVICE_TAG: self.lm.device.type,
                MODEL_TAG: self.lm.model_id,
                DECODE_TAG: decode_description(self.lm),
                **load_tags(),  # a dry run says when its reference ran under load
                **thread_tags(self.threads),
            }
        run_id = self._stack.enter_context(
            tracking.tracked_run(experiment, name, tags=tags, run_id=self.existing)
        )
        if new:
            self.run_dir = RunDir(results_root, run_id)
            tracking.client().set_tag(run_id, RUN_DIR_TAG, str(self.run_dir.path.resolve()))
        else:
            tracking.client().set_tag(run_id, REOPENED_TAG, "true")
        assert self.run_dir is not None
        self.run_dir.create()
        self.run_id = run_id
        return run_id, new

    @property
    def parent_id(self) -> str:
        """The parent run's id, once it is open (``start``)."""
        if self.run_id is None:
            raise RunError("the parent run has no id until it opens (start)")
        return self.run_id

    @property
    def directory(self) -> RunDir:
        """The run folder, once the parent run is open (``start``)."""
        if self.run_dir is None:
            raise RunError("the run folder is made when the parent run opens (start)")
        return self.run_dir

    @property
    def executor(self) -> Executor:
        """The executor of ``execution.executor`` on this session's model, made once."""
        if self._executor is None:
            self._executor = make_executor(self.config, self.model)
            self._stack.callback(self._executor.close)
        return self._executor

    def close_executor(self) -> None:
        """Release the workers early (before scoring, which needs none of them)."""
        if self._executor is not None:
            self._executor.close()


def thread_tags(choice: ThreadChoice | None) -> dict[str, str]:
    """The run's tags for its torch threads (a ``steering.platform.ThreadChoice``; None:
    the model was handed in, threaded by the caller: torch's count now)."""
    if choice is None:
        from steering.platform import ThreadChoice

        choice = ThreadChoice(ThreadChoice.unchanged().threads, "the caller's (model handed in)")
    return {
        THREADS_TAG: str(choice.threads),
        THREADS_FROM_TAG: choice.describe(),
        WAIT_POLICY_TAG: choice.wait_policy,
    }


def recorded_threads(run: Any) -> int | None:
    """The torch thread count an existing MLflow run started with (its tag), if any."""
    text = run.data.tags.get(THREADS_TAG, "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def embedder_device(config: RunConfig, lm: LoadedModel | None) -> str:
    """Where the embedder runs: the model's platform decides (``--device cpu`` on a GPU
    host keeps it on the CPU too); without a model (a rescore), the config's device."""
    from metrics.embedder import device_for

    return lm.platform.embedder_device if lm is not None else device_for(config.device)


@contextmanager
def open_run(
    config: C | None = None,
    *,
    resume: Resume | None = None,
    results_dir: str | Path | None = None,
    execution: dict[str, Any] | None = None,
    lm: LoadedModel | None = None,
    embedder: SentenceTransformer | None = None,
    need_embedder: bool = True,
    graph: ConceptGraph | None = None,
    progress: Callable[[str], None] | None = None,
    phase: Phase | None = None,
    need_model: bool = True,
) -> Iterator[RunSession[C]]:
    """A session for a new run (``config``) or an existing one (``resume``: resumed, or
    rescored); the parent run and the executor are closed when
    the block ends, with the status that says how it ended. ``phase``: the phase of the
    command, which an existing run's stored config must be (Phase 5 when None).
    ``need_embedder``: False when nothing is scored by embedding (no embedder loaded);
    ``need_model``: False for a study that reads finished runs' files only (the pooled
    held-out scoring)."""
    say = progress or (lambda _msg: None)
    timer = Timer()
    run_dir = None
    existing = resume.run_id if resume else None
    recorded = None
    if resume is not None:
        stored = tracking.get_run(resume.run_id)
        recorded = recorded_threads(stored)
        run_dir = RunDir.locate(stored, results_dir)
        # the stored config is read as ``phase``'s model: the C of this session
        config = cast(C, scoring_config(run_dir, list(resume.overrides), resume.action, phase))
    if config is None:
        raise RunError("a run needs a config, or the id of the run to resume")
    if execution:
        merged = {**config.execution.model_dump(), **execution}
        try:
            chosen = ExecutionConfig.model_validate(merged)
        except ValueError as exc:  # pydantic's ValidationError
            raise RunError(f"invalid execution settings {execution}: {exc}") from None
        config = config.model_copy(update={"execution": chosen})
    threads = None
    with timer.time("model_load"):
        reads_texts = resume is not None and resume.action == "rescore"  # a rescore reads texts
        if lm is None and need_model and not reads_texts:
            say(f"loading model {config.model}")
            lm = config.model_spec.load()
            # torch's threads from the cores free now (or the user's, or the resumed
            # run's first count); a model handed in keeps its caller's threads
            threads = lm.platform.choose_threads(recorded)
            say(f"torch threads: {threads.threads} ({threads.describe()})")
        elif lm is None and recorded is not None:
            # a rescore embeds on the run's first count, so its Δ keeps the run's last bits
            from steering.platform import platform_for

            choice = platform_for(embedder_device(config, None)).choose_threads(recorded)
            say(f"torch threads: {choice.threads} ({choice.describe()})")
        if embedder is None and need_embedder:
            from metrics.embedder import load_embedder

            embedder = load_embedder(config.embedding.model, embedder_device(config, lm))
    session: RunSession[C] = RunSession(
        config,
        graph if graph is not None else load_graph(config),
        timer,
        lm,
        embedder,
        existing,
        run_dir,
        existing,
        say,
        threads,
    )
    with session._stack:
        yield session
