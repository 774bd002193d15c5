"""A model's coherent range of β, kept with its classifiers, and the β a run takes from it.

β = 0.2 was chosen on Gemma 3 270M (docs/findings.md); on SmolLM2 135M it turns s = +1
into token soup. ``steer-eval calibrate-strength`` (``experiments/strength/sweep.py``)
sweeps β and writes what it found here, as ``strength_range.json`` in the classifier
folder of the model, dtype and layer it swept (the folder a run at that layer steers
from). A run reads it back through :func:`choose_beta`:

- ``steering.beta: auto`` takes the range's β (its strongest coherent one);
- a number inside the range is kept, so the embedded default's β = 0.2 and its texts
  stay as they were;
- a number outside the range is replaced by the range's β when the run's model is not
  the one its config names, and the run says so; one given on the command line
  (``--set steering.beta=...``), or by a config for the model it names (phase5.yaml's
  0.2 for the embedded 270M, so ``make run`` never changes), is kept with a warning.
  "The model it names" is decided on the model the run resolves to (its probe id), not
  on how it was spelled: ``run`` and ``run --model embedded`` keep the same β
  (:func:`kept_keys`);
- without a recorded range, a number is kept and ``auto`` is an error naming the fix.

The held-out β grid (``selection.beta_grid``) is kept to the range the same way.

A sweep too thin to trust says so (:func:`thin_warnings`, the record's ``warnings``),
and so does every run that takes its β from it. Thin is read from what the sweep
measured: fewer than :data:`MIN_CONCEPTS` concepts (5), fewer than :data:`MIN_PROMPTS`
prompts (3), fewer than :data:`MIN_NEW_TOKENS` new tokens (32: too short for a text to
fall apart), or a range of a single grid point (its edges were never bracketed: the
coherent range may be far wider or only that point). A range recorded before the rule
was read gets the rule applied when it is loaded.

Phase 6 trains a probe set of its own per training size and seed, so no range sits in
its folders: ``calibrate`` looks the range up by what it describes (model, layer, mode,
vector source) across every classifier set under ``classifier.dir``
(:func:`shared_range`), and ``identify``, whose pre-registration binds its grid, only
says when its grid leaves a recorded range (:func:`range_warning`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel, Field

from experiments.config import ConfigError, RunConfig, SelectionConfig, SteeringConfig

C = TypeVar("C", bound=RunConfig)  # the phase config a β is chosen for

RANGE_FILE = "strength_range.json"
BETA_TAG = "steer_eval.beta_source"  # a parent run's tag: where its β (and grid) came from
RANGE_FORMAT = "steer-eval/strength-range"
RANGE_VERSION = 1
_TOLERANCE = 1e-9  # a β written as 0.2 in a config and swept as 0.2 are the same
# Below these a sweep is too thin to trust (:func:`thin_warnings`)
MIN_CONCEPTS = 5
MIN_PROMPTS = 3
MIN_NEW_TOKENS = 32


class Unsteered(BaseModel):
    """The unsteered texts' measures, which each step is judged against."""

    perplexity: float | None  # median; None: no text had a token
    near_empty: float
    distinct_2: float


class StrengthStep(BaseModel):
    """What the steered texts at one β and sign look like beside the unsteered ones."""

    beta: float
    sign: int = Field(description="the strength's sign: +1 or -1 (s = ±1)")
    arm: str = Field("concept", description="concept, or random:j (the run's null)")
    texts: int
    perplexity_multiple: float | None = Field(
        description="median perplexity of the steered texts (under the unsteered model) "
        "over the unsteered texts' median"
    )
    near_empty: float = Field(description="share of texts with fewer than 3 words")
    distinct_2: float = Field(description="mean share of distinct word bigrams per text")
    coherent: bool
    why: list[str] = Field(default_factory=list, description="the limits it broke")


class StrengthLimits(BaseModel):
    """When a β counts as coherent (every sign swept must pass all three)."""

    perplexity_multiple: float = Field(
        15.0,
        description="at most this multiple of the unsteered median perplexity (the 270M "
        "sweep: 3.5-12.7x at |β·s| = 0.2, 30x at -0.3)",
    )
    near_empty_excess: float = Field(
        0.1,
        description="near-empty share at most this much (plus one text) above the unsteered share",
    )
    distinct_2_ratio: float = Field(
        0.9,
        description="distinct-2 of the texts that are not near-empty at least this fraction "
        "of the unsteered texts'",
    )


class StrengthRange(BaseModel):
    """The record of one sweep (``strength_range.json``), with the range it found."""

    format: str = RANGE_FORMAT
    version: int = RANGE_VERSION
    model_id: str = Field(description="the probe id: the model, with its dtype unless fp32")
    layer: int
    mode: str
    vector_source: str
    alpha: float = Field(description="the layer's median residual norm: β·α per unit s")
    grid: list[float]
    concepts: list[str]
    prompts: int
    max_new_tokens: int
    seed: int
    limits: StrengthLimits
    unsteered: Unsteered
    steps: list[StrengthStep]
    low: float | None = Field(description="the smallest coherent β; None: none was")
    high: float | None = Field(description="the largest β up to which every β is coherent")
    beta: float | None = Field(description="the β a run takes from the range: its high end")
    seconds: float = 0.0
    run_id: str | None = Field(None, description="the sweep's MLflow run (strength-sweeps)")
    warnings: list[str] = Field(
        default_factory=list,
        description="why the sweep is too thin to trust (thin_warnings); empty: it is not",
    )

    def contains(self, beta: float) -> bool:
        return (
            self.low is not None
            and self.high is not None
            and self.low - _TOLERANCE <= beta <= self.high + _TOLERANCE
        )

    def points(self) -> list[float]:
        """The range's ends and β, sorted, each once (none when no β was coherent)."""
        return sorted({b for b in (self.low, self.beta, self.high) if b is not None})

    def describe(self) -> str:
        if self.low is None:
            return f"no coherent β in the swept grid {self.grid}"
        return f"coherent β {self.low:g}-{self.high:g}"


def thin_warnings(record: StrengthRange) -> list[str]:
    """Why a sweep is too thin to trust, from what it measured (the rule in the module
    docstring); empty when it is not."""
    said = []
    if len(record.concepts) < MIN_CONCEPTS:
        said.append(f"{len(record.concepts)} concepts (fewer than {MIN_CONCEPTS})")
    if record.prompts < MIN_PROMPTS:
        said.append(f"{record.prompts} prompts (fewer than {MIN_PROMPTS})")
    if record.max_new_tokens < MIN_NEW_TOKENS:
        said.append(f"{record.max_new_tokens} new tokens (fewer than {MIN_NEW_TOKENS})")
    if record.low is not None and sum(record.contains(b) for b in record.grid) < 2:
        said.append(f"a range of one grid point ({record.low:g}): its edges were not found")
    return said


def thin_note(record: StrengthRange) -> str:
    """The warning a thin sweep carries in a sentence, or '' when it is not thin."""
    if not record.warnings:
        return ""
    return (
        f"a thin sweep ({'; '.join(record.warnings)}): rerun `steer-eval calibrate-strength` "
        "with more concepts (--concepts), tokens (--set generation.max_new_tokens=...) or "
        "grid points (--grid) before trusting it"
    )


def save_range(directory: Path, record: StrengthRange) -> Path:
    path = Path(directory) / RANGE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.model_dump(mode="json"), indent=1))
    return path


def load_range(directory: Path) -> StrengthRange | None:
    """The range recorded in a classifier folder, or None; a clear error for a file of
    another format or version."""
    path = Path(directory) / RANGE_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("format") != RANGE_FORMAT or data.get("version") != RANGE_VERSION:
        raise ConfigError(
            f"{path} is not a {RANGE_FORMAT} v{RANGE_VERSION} file; rerun "
            "`steer-eval calibrate-strength` for this model and layer"
        )
    record = StrengthRange.model_validate(data)
    if "warnings" not in data:  # recorded before the rule: apply it now
        record = record.model_copy(update={"warnings": thin_warnings(record)})
    return record


@dataclass(frozen=True)
class BetaChoice(Generic[C]):
    """The config a run steers with (of the phase it came in as), and the sentence that
    says where its β came from."""

    config: C
    message: str
    source: str  # config | range | auto | command line


def kept_keys(
    set_: list[str] | None,
    cfg: RunConfig | None,
    config: Path,
    overlays: list[Path] | None = None,
) -> frozenset[str]:
    """The config keys a recorded strength range never replaces (``choose_beta``'s
    ``explicit``): those set on the command line (``--set steering.beta=...``), and the β
    of a config run on the model its file names (phase5.yaml's 0.2 for the embedded 270M,
    so `make run` never changes). Which model that is is decided on the model the run
    resolves to (its probe id: id and dtype), never on how it was spelled: ``run`` and
    ``run --model embedded`` on phase5.yaml keep the same β. On another model a config β
    outside that model's recorded range is replaced by the range's. ``cfg``: the resolved
    config (None for a resume, which keeps its stored β); ``config``, ``overlays``: the
    file(s) as given."""
    from experiments.config import load_config, parse_override
    from steering.assets import AssetError
    from steering.models import ModelSpecError
    from steering.platform import DtypeError
    from steering.preflight import probe_id_of_spec

    explicit = frozenset(".".join(parse_override(text)[0]) for text in set_ or [])
    if cfg is None:
        return explicit
    own = load_config(config, [], cfg.phase, overlays or []).model_spec
    run = cfg.model_spec
    try:
        same = own == run or probe_id_of_spec(own) == probe_id_of_spec(run)
    except (AssetError, ModelSpecError, DtypeError):  # not here: not the run's model
        same = False
    return explicit | {"steering.beta"} if same else explicit


def choose_beta(
    config: C,
    found: StrengthRange | None,
    where: Path,
    explicit: frozenset[str] = frozenset(),
) -> BetaChoice[C]:
    """The β (and held-out grid) a new run uses, given the range recorded in ``where``.

    ``explicit``: the config keys given on the command line (``steering.beta``,
    ``selection.beta_grid``), which the range never replaces."""
    steering = config.steering
    if steering.scale == "file":  # the file's norms × coefficient: no β to take from a range
        return BetaChoice(
            config,
            f"no β: steering.scale file steers at the file's own norms × coefficient "
            f"{steering.coefficient:g}",
            "config",
        )
    if found is not None and (found.mode, found.vector_source) != (
        steering.mode,
        steering.vector_source,
    ):
        found = None  # swept with other vectors: says nothing about these
    beta = steering.beta
    if found is None or found.beta is None:
        if beta == "auto":
            reason = "no coherent β was found" if found is not None else "no range is recorded"
            raise ConfigError(
                f"steering.beta auto: {reason} for this model, layer and vector source "
                f"under {where}; run `steer-eval calibrate-strength` with the same model, "
                "layer and config first, or give steering.beta a number"
            )
        said = found.describe() if found is not None else "no strength range recorded"
        return BetaChoice(
            config,
            f"β {beta:g} from the config ({said} under {where}; "
            "`steer-eval calibrate-strength` finds one)",
            "config",
        )
    span = f"the recorded range {found.low:g}-{found.high:g} ({where / RANGE_FILE})"
    if beta == "auto":
        chosen, source, message = found.beta, "auto", f"β auto: {found.beta:g}, the top of {span}"
    elif found.contains(beta):
        chosen, source, message = beta, "config", f"β {beta:g} from the config, inside {span}"
    elif "steering.beta" in explicit:
        chosen, source = beta, "command line"
        message = (
            f"β {beta:g} given for this model (on the command line, or by the config that "
            f"names it), kept although outside {span}"
        )
    else:
        chosen, source = found.beta, "range"
        message = (
            f"β {found.beta:g} from {span}: the config's {beta:g} lies outside it "
            "(--set steering.beta=... keeps a β of your own)"
        )
    update: dict[str, SteeringConfig | SelectionConfig] = {
        "steering": steering.model_copy(update={"beta": chosen})
    }
    grid = _grid_in_range(config, found, explicit)
    if grid is not None:
        update["selection"] = config.selection.model_copy(update={"beta_grid": grid})
        message += f"; held-out β grid {grid}"
    if found.warnings:
        message += f". Warning: the range comes from {thin_note(found)}"
    return BetaChoice(config.model_copy(update=update), message, source)


def _grid_in_range(
    config: RunConfig, found: StrengthRange, explicit: frozenset[str]
) -> list[float] | None:
    """The held-out grid kept to the range (its points inside, else the range's ends and
    β), or None when it needs no change."""
    grid = config.selection.beta_grid
    if config.selection.mode != "heldout" or "selection.beta_grid" in explicit:
        return None
    inside = [b for b in grid if found.contains(b)]
    if len(inside) == len(grid):
        return None
    return inside or found.points()


def recorded_ranges(
    root: Path,
    model_id: str | None = None,
    layer: int | None = None,
    mode: str | None = None,
    vector_source: str | None = None,
) -> list[tuple[Path, StrengthRange]]:
    """Every range recorded in a classifier folder under ``root``: (folder, range), by
    folder name; narrowed, where given, to a model (its id: every dtype of it), layer,
    steering mode and vector source (``calibrate-strength --list`` and ``--clear``)."""
    found = []
    for path in sorted(Path(root).glob(f"*/{RANGE_FILE}")):
        record = load_range(path.parent)
        if record is None:
            continue
        wanted = (
            model_id in (None, record.model_id.split("@")[0]),
            layer in (None, record.layer),
            mode in (None, record.mode),
            vector_source in (None, record.vector_source),
        )
        if all(wanted):
            found.append((path.parent, record))
    return found


def remove_range(directory: Path) -> None:
    """Forget the range recorded in a classifier folder: runs there go back to their
    config's β."""
    (Path(directory) / RANGE_FILE).unlink(missing_ok=True)


def shared_range(
    root: Path, model_id: str, layer: int, mode: str, vector_source: str
) -> tuple[StrengthRange | None, Path]:
    """The range recorded for this model, layer, mode and source in any classifier set
    under ``root``, and the folder it came from (``root`` when none is). Several sweeps
    that found the same range are one; sweeps that disagree are an error naming each,
    since which one is right is the researcher's call, not the lookup's."""
    found = [  # this probe id only (a model id alone would take every dtype of it)
        (where, record)
        for where, record in recorded_ranges(root, None, layer, mode, vector_source)
        if record.model_id == model_id
    ]
    if not found:
        return None, Path(root)
    kinds = {(r.low, r.high, r.beta) for _, r in found}
    if len(kinds) > 1:
        listed = "; ".join(f"{where}: {r.describe()}" for where, r in found)
        raise ConfigError(
            f"{len(found)} strength sweeps of {model_id} at layer {layer} ({mode}, "
            f"{vector_source}) disagree: {listed}. Remove the stale {RANGE_FILE}, or give "
            "the strengths yourself: --set steering.beta=B --set selection.beta_grid=[...]"
        )
    return found[0][1], found[0][0]


def range_warning(config: RunConfig, found: StrengthRange | None, where: Path) -> str | None:
    """A sentence when the config's β or held-out grid leaves a recorded range (for a
    study that keeps its config as given), else None."""
    steering, selection = config.steering, config.selection
    if found is None or found.beta is None:
        return None
    if (found.mode, found.vector_source) != (steering.mode, steering.vector_source):
        return None  # swept with other vectors: says nothing about these
    if selection.mode == "heldout":
        outside = [b for b in selection.beta_grid if not found.contains(b)]
    else:
        beta = steering.beta
        outside = [] if beta == "auto" or found.contains(beta) else [beta]
    if not outside:
        return None
    grid = ",".join(f"{b:g}" for b in found.points())
    return (
        f"β {', '.join(f'{b:g}' for b in outside)} outside {found.describe()} recorded for "
        f"this model and layer ({where / RANGE_FILE}), kept as the config gives it; "
        f"--set steering.beta={found.beta:g} --set selection.beta_grid=[{grid}] steers inside it"
        + (f". Warning: the range comes from {thin_note(found)}" if found.warnings else "")
    )
