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
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.status import Status

    from experiments.config import Phase, RunConfig

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
        try:
            os.get_terminal_size(stream.fileno())
            return
        except (AttributeError, ValueError, OSError):
            continue
    os.environ["COLUMNS"] = str(PIPED_WIDTH)


fit_width()

# Logs, progress and messages go to stderr; result tables and --json go to stdout, so
# `steer-eval run --json > result.json` captures the result and nothing else.
console = Console(stderr=True)
out = Console()
DEFAULT_CONFIG = Path("configs/phase5.yaml")


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean 'your input is wrong', shown without a traceback."""
    from experiments.concepts import ConceptError
    from experiments.config import ConfigError
    from experiments.execution import ExecutionError
    from experiments.phase5.run import RunError
    from experiments.prompts import PromptError
    from experiments.record import RecordError
    from steering.assets import AssetError
    from steering.models import LayerIndexError, ModelSpecError
    from steering.platform import DtypeError
    from steering.probes import ProbeError

    errors: list[type[BaseException]] = [
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
    ]
    try:
        from metrics.embedder import EmbedderError

        errors.append(EmbedderError)
    except ImportError:  # pragma: no cover
        pass
    from experiments.validation.errors import ValidationInputError
    from steering.vector_files import VectorFileError

    errors += [ValidationInputError, VectorFileError]
    with contextlib.suppress(ImportError):
        from experiments.phase5.export import ExportError

        errors.append(ExportError)
    with contextlib.suppress(ImportError, AttributeError):
        from judges import JudgeError

        errors.append(JudgeError)
    return tuple(errors)


def friendly(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
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
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover
        pass


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


def show_run_address(run_id: str) -> str:
    """Print where the run is in the MLflow UI (and return the address)."""
    from experiments import tracking

    url = tracking.run_ui_url(run_id)
    out.print(f"MLflow UI: {url}", soft_wrap=True, highlight=False, markup=False)
    if not ui_running(tracking.ui_base()):
        console.print(UI_NOT_RUNNING, highlight=False, markup=False)
    return url


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

    extra = list(overrides or [])
    if model is not None:
        extra.append(f"model={model}")
    if layer is not None:
        extra.append(f"layer={layer}")
    if concepts is not None:
        extra.append(f"concepts.limit={concepts}")
    return load_config(config, extra, phase, overlays or [])


def say_stage(status: Status, message: str, start: float) -> None:
    """A long study's stage as a line with its elapsed time (it stays in a log, and a
    line such as where β came from stays on screen: a spinner alone keeps neither) and on
    the spinner (``status``: rich's ``console.status``)."""
    import time

    minutes, seconds = divmod(int(time.monotonic() - start), 60)
    console.print(f"[dim]{minutes:3d}:{seconds:02d} {message}", highlight=False)
    status.update(f"[dim]{message}")
