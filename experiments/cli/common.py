"""What every ``steer-eval`` command shares: the console, error handling, options.

Errors caused by the user's input (a bad config, a missing asset, an unknown run id)
are printed as one clear message with exit code 2, never as a bare traceback.
Only the ``experiments.cli`` package imports typer and rich.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.exceptions import TyperException

if TYPE_CHECKING:
    from typing import TypeAlias

    from rich.progress import Progress
    from rich.status import Status
    from typer._click.core import Context, Parameter  # typer's own click: its commands' types

    from experiments.config import Phase, RunConfig

    Callback: TypeAlias = Callable[[int, int], None]  # a library's progress: (done, total)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # keep stderr readable

# Help and tables take the terminal's width (rich reads COLUMNS, then the size of the
# terminal that stdin, stdout or stderr is). With neither (output piped or captured)
# rich would wrap at 80 columns and cut option help with "…"; this width is used then.
PIPED_WIDTH = 120


def fit_width() -> None:
    """Give rich (the CLI's tables and typer's help) a width when no terminal tells it
    one: ``COLUMNS`` is set to :data:`PIPED_WIDTH` unless it is set already or a
    standard stream is a terminal (whose width rich then reads itself)."""
    import sys

    if os.environ.get("COLUMNS") or os.environ.get("TERMINAL_WIDTH"):
        return
    for stream in (sys.stdout, sys.stderr, sys.stdin):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            os.get_terminal_size(stream.fileno())
            return
    os.environ["COLUMNS"] = str(PIPED_WIDTH)


fit_width()

# Logs, progress and messages go to stderr; result tables and --json go to stdout, so
# `steer-eval run --json > result.json` captures the result and nothing else.
console = Console(stderr=True)
out = Console()
DEFAULT_CONFIG = Path("configs/phase5.yaml")


def plain_flags(params: list[Parameter]) -> list[Parameter]:
    """``params`` with each flag's type shown as nothing: typer 0.29 prints ``<bool>``
    beside every flag in ``--help`` (``--json <bool>``), though a flag takes no value."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""  # what typer shows as the flag's type
    return params


class Command(TyperCommand):
    """A command whose help shows its flags, ``--help`` included, without a type."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain_flags(super().get_params(ctx))


class Group(TyperGroup):
    """``steer-eval`` and its command groups (``human``), flags shown as commands'."""

    def get_params(self, ctx: Context) -> list[Parameter]:
        return plain_flags(super().get_params(ctx))


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean 'your input is wrong', shown without a traceback."""
    from experiments.concepts import ConceptError
    from experiments.config import ConfigError
    from experiments.execution import ExecutionError
    from experiments.phase5.export import ExportError
    from experiments.phase5.run import RunError
    from experiments.prompts import PromptError
    from experiments.record import RecordError
    from experiments.validation.errors import ValidationInputError
    from judges import JudgeError
    from metrics.embedder import EmbedderError
    from steering.assets import AssetError
    from steering.models import LayerIndexError, ModelSpecError
    from steering.platform import DtypeError
    from steering.probes import ProbeError
    from steering.vector_files import VectorFileError

    return (
        ConceptError,
        ConfigError,
        ExecutionError,
        RunError,
        RecordError,
        AssetError,
        LayerIndexError,
        ModelSpecError,
        DtypeError,
        ProbeError,
        PromptError,
        LookupError,
        FileNotFoundError,
        ValidationInputError,
        VectorFileError,
        EmbedderError,
        ExportError,
        JudgeError,
    )


def refuse(message: str) -> NoReturn:
    """The user's input refused: ``message`` as an error, exit 2."""
    console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(2)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, TyperException):
            raise  # said already, or typer's own: before user_errors() imports the errors
        except user_errors() as exc:
            # The message quotes user input (values, paths): printed as text, never as
            # markup (a "[...]" in it would otherwise vanish as a style tag).
            console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]: results written so far are kept")
            raise typer.Exit(130) from None

    return wrapper


def progress_display(transient: bool) -> Progress:
    """A rich progress display on stderr: description, bar, done/total, time."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )


def generation_bars(progress: Progress) -> tuple[Callback, Callback]:
    """``(on_batch, on_step)`` drawing the generation's bars on ``progress``: shown from
    the first batch (an error before it, a bad model or a missing store, is not printed
    under an empty bar) and timed from the first token, so the time shown is the
    generation's (each batch's texts, then their perplexity), not the loading, classifier
    training and vectors that come before it."""
    bars = (
        progress.add_task("generations (texts, then their perplexity)", start=False),
        progress.add_task("tokens (current batch)", start=False),
    )
    for bar in bars:
        progress.update(bar, total=None, visible=False)
    started: list[bool] = []

    def generating() -> None:
        if not started:
            started.append(True)
            for bar in bars:
                progress.start_task(bar)

    def on_batch(done: int, total: int) -> None:
        generating()
        progress.update(bars[0], completed=done, total=total, visible=True)

    def on_step(step: int, steps: int) -> None:
        generating()
        progress.update(bars[1], completed=step + 1, total=steps, visible=True)

    return on_batch, on_step


@contextlib.contextmanager
def progress_bars() -> Iterator[Callable[[str, int, int], None]]:
    """Progress bars on stderr (rich, the suite's one progress library); yields
    ``report(what, done, total)``, which the library code calls (it draws nothing)."""
    with progress_display(transient=True) as bars:
        tasks: dict[str, Any] = {}

        def report(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bars.add_task(escape(what), total=total)
            bars.update(tasks[what], completed=done, total=total)

        yield report


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("transformers", "sentence_transformers", "httpx", "urllib3", "mlflow"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    with contextlib.suppress(ImportError):
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()


ConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="YAML experiment config")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="override any field: --set generation.max_new_tokens=20"),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(help="'embedded', a Hugging Face id (google/gemma-3-4b-pt), a directory or .gguf"),
]
LayerOpt = Annotated[int | None, typer.Option(help="decoder layer (default: the middle one)")]
LayerAutoOpt = Annotated[
    str | None,
    typer.Option(
        "--layer",
        help="decoder layer (default: the middle one); or a rule over the middle half of "
        "the layers: auto, the best probe AUROC (cheap, one model pass), or auto-effect, "
        "the best measured steering effect above random directions on the selection "
        "prompts (generates texts at each layer)",
    ),
]
# --layer's rules (experiments/kernel/layers.py RULES, not imported here: it loads torch)
LAYER_RULES = ("auto", "auto-effect")


def parse_layer(text: str | None) -> int | str | None:
    """``--layer``: a number, a rule (:data:`LAYER_RULES`) or nothing; a clear error
    naming the choices for anything else."""
    if text is None or text in LAYER_RULES:
        return text
    try:
        return int(text)
    except ValueError:
        raise typer.BadParameter(
            f"--layer {text!r}: give a layer number, auto (the best probe AUROC) or "
            "auto-effect (the best measured steering effect)"
        ) from None


ConceptsOpt = Annotated[int | None, typer.Option("--concepts", help="use the first N concepts")]
StudyDryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="check the model, its layers and dtype from the model's config and print the "
        "stages and an estimate, loading no weights",
    ),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="log more")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="print the result as JSON on stdout instead of tables")
]
# What `latest` means to a command that takes a Phase 5 run: the newest run of the
# experiment given, else of the config's.
LatestConfigOpt = Annotated[
    Path, typer.Option("--config", "-c", help="config whose experiment `latest` searches")
]
LatestExperimentOpt = Annotated[
    str | None, typer.Option(help="MLflow experiment `latest` searches (default: the config's)")
]


# The optional extras a command may need (pyproject.toml's optional dependencies): the
# module each provides -> what it is, and the line that installs it.
EXTRAS = {
    "llama_cpp": (
        "llama-cpp-python (the judge extra)",
        "make setup-judge, or pip install -e '.[judge]' (builds llama.cpp: about 7.5 min)",
    ),
    "ray": ("Ray (the ray extra)", "make setup-ray, or pip install -e '.[ray]'"),
}


def require_extra(module: str, needed_by: str, instead: str = "") -> None:
    """Exit 2 with one line that says how to install ``module``'s extra when it cannot
    be imported (:data:`EXTRAS`); called by a command before it loads or writes
    anything, so a missing extra costs no model load and leaves no half-written files.
    ``instead``: what works without it (another judge, another executor)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        what, install = EXTRAS[module]
        other = f"; or {instead}" if instead else ""
        console.print(
            f"[bold red]error:[/] {escape(needed_by)} needs {what}, which is not installed "
            f"({escape(str(exc))}): {escape(install)}{escape(other)}",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(2) from None


def print_json(data: Any) -> None:
    """The machine-readable result on stdout (NaN and infinities as null)."""
    import json
    import math
    import sys

    def clean(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {str(k): clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [clean(v) for v in value]
        if hasattr(value, "item"):  # numpy scalars
            return clean(value.item())
        if isinstance(value, Path):
            return str(value)
        return value

    sys.stdout.write(json.dumps(clean(data), indent=1, default=str) + "\n")


def resolve_run(run: str, experiment: str, phase: str, finished: bool = True) -> str:
    """A run id as given, or ``latest``: the newest top-level run of the phase (the newest
    unfinished one with ``finished=False``, for ``--resume latest``)."""
    if run != "latest":
        return run
    from experiments import tracking

    return tracking.latest_parent_run(experiment, phase, finished=finished)


# How a run is named by its ``phase`` tag (another tag: as it is).
PHASE_NAMES = {
    "4": "Phase 4 (classifiers)",
    "5": "Phase 5",
    "6": "Phase 6",
    "6-identify": "identify",
    "strength": "strength sweep (calibrate-strength)",
}


def phase5_parent(run_id: str, command: str) -> str:
    """``run_id`` when it is a Phase 5 parent run (what ``samples``, ``rescore`` and
    ``export`` read), else a LookupError that says what the run is and the command that
    does take it: the parent of a child run, ``steer-eval run`` for a Phase 4 run's
    classifiers, ``steer-eval runs`` for the Phase 5 runs there are."""
    from experiments import tracking

    tags = tracking.get_run(run_id).data.tags
    phase, parent = tags.get("phase"), tags.get("mlflow.parentRunId")
    if phase == "5" and parent is None:
        return run_id
    if parent is not None:
        raise LookupError(
            f"run {run_id} is a child run of {parent}; `{command}` takes the parent run: "
            f"`steer-eval {command} {parent}`"
        )
    if phase in PHASE_NAMES:
        kind = f"a {PHASE_NAMES[phase]} run"
    else:
        kind = f"a run of phase {phase!r}" if phase else "not one of the suite's runs"
    then = ""
    if phase == "4":  # the Phase 5 runs that steered with its classifiers, newest first
        steered = _steered_with(run_id)
        then = (
            f"; `steer-eval {command} {steered[0]}` takes the newest Phase 5 run that steered "
            f"with its classifiers ({len(steered)} did)"
            if steered
            else "; `steer-eval run` steers with its classifiers, and that Phase 5 run is "
            f"the one to give `{command}`"
        )
    raise LookupError(
        f"run {run_id} is {kind}, not a Phase 5 run: `{command}` reads a Phase 5 run's "
        f"texts{then}; `steer-eval runs` lists the runs with their phase"
    )


def _steered_with(phase4_run: str) -> list[str]:
    """The Phase 5 parent runs whose classifiers a Phase 4 run trained, newest first."""
    from experiments import tracking
    from experiments.phase5.publish import PHASE4_TAG

    c = tracking.client()
    experiments = [e.experiment_id for e in c.search_experiments()]
    runs = c.search_runs(
        experiments,
        filter_string=f"tags.`{PHASE4_TAG}` = '{phase4_run}' and tags.mlflow.parentRunId IS NULL",
        order_by=["attributes.start_time DESC"],
        max_results=50,
    )
    return [r.info.run_id for r in runs]


def show_run_address(run_id: str) -> None:
    """Print where the run is in the MLflow UI."""
    from experiments import tracking

    url = tracking.run_ui_url(run_id)
    out.print(f"MLflow UI: {url}", soft_wrap=True, highlight=False, markup=False)
    if not ui_running(tracking.ui_base()):
        console.print(UI_NOT_RUNNING, highlight=False, markup=False)


def ui_running(base: str, timeout: float = 0.5) -> bool:
    """Whether a UI answers at ``base`` (its ``/health``): an address printed for a
    local store opens only once ``steer-eval ui`` serves it."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{base}/health", timeout=timeout) as reply:
            return cast(int, reply.status) == 200  # urlopen's reply is untyped
    except (OSError, ValueError):
        return False


UI_NOT_RUNNING = (
    "(the MLflow UI is not running; start it with `steer-eval ui` or `make ui`, then open "
    "the address)"
)


def resolve_config(
    config: Path,
    overrides: list[str] | None,
    model: str | None = None,
    layer: int | None = None,
    concepts: int | None = None,
    phase: Phase | None = None,
    overlays: list[Path] | None = None,
) -> RunConfig:
    """The ``--config`` file (of ``phase``, the command's; any when None) with
    ``overlays`` (``--quick``) and the options as overrides."""
    from experiments.config import load_config

    options = (("model", model), ("layer", layer), ("concepts.limit", concepts))
    return load_config(config, with_overrides(overrides, *options), phase, overlays or [])


def with_overrides(overrides: list[str] | None, *options: tuple[str, object]) -> list[str]:
    """``overrides`` (``--set``'s) and then ``key=value`` for each option given (not None)."""
    return [*(overrides or []), *(f"{key}={value}" for key, value in options if value is not None)]


def warn_store() -> None:
    """A warning line per thing the local store keeps outside its own folder
    (``tracking.store_warnings``): a copy of the project would still use it."""
    from experiments import tracking

    lines = tracking.store_warnings()
    if not lines:
        return
    db = tracking.sqlite_path()
    home = db.resolve().parent if db is not None else Path.cwd()
    console.print(
        f"[bold yellow]warning:[/] the MLflow store {escape(str(db))} points outside its "
        f"folder {escape(str(home))} (a copy of this folder would still use these):",
        highlight=False,
    )
    for line in lines:
        console.print(f"  {escape(line)}", highlight=False)


def say_stage(status: Status, message: str, start: float) -> None:
    """A long study's stage as a line with its elapsed time (it stays in a log, and a
    line such as where β came from stays on screen: a spinner alone keeps neither) and on
    the spinner (``status``: rich's ``console.status``)."""
    import time

    minutes, seconds = divmod(int(time.monotonic() - start), 60)
    console.print(f"[dim]{minutes:3d}:{seconds:02d} {message}", highlight=False)
    status.update(f"[dim]{message}")
