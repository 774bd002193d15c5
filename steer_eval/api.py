""":func:`evaluate`: a model and vectors in, the answer and the texts out.

The call is ``steer-eval run`` from Python, not a second pipeline: its keywords become
the command's settings (``settings.py``), Python vectors become the file a run reads
(``vectors.py``), and the run goes through the one Study runner
(``experiments.phase5.run.run_phase5`` → ``kernel/study.run_study``). So the record, its
config hash and the answer are those of the equivalent command line, which the result
carries (``Result.command``) and the MLflow run keeps as the tag ``steer_eval.evaluate``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from steer_eval.errors import ArgumentError
from steer_eval.result import DEFAULT_CONFIG, Result, result_of
from steer_eval.settings import Settings, given_overrides, option_overrides, override
from steer_eval.vectors import (
    Concepts,
    Vectors,
    concepts_of_file,
    entries,
    is_control_vector,
    stage,
)

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from experiments.config import RunConfig
    from steering.models import LoadedModel

EVALUATE_TAG = "steer_eval.evaluate"  # the equivalent command line of an evaluate() call
LAYER_RULES = ("auto", "auto-effect")
OWN = (
    "model", "vectors", "concepts", "layer", "beta", "coefficient", "layers", "scale",
    "config", "overrides", "results_dir", "lm", "embedder", "progress",
)  # fmt: skip


def evaluate(
    model: str | os.PathLike[str] | None = None,
    vectors: Vectors | None = None,
    *,
    concepts: int | str | Sequence[str] | None = None,
    layer: int | Literal["auto", "auto-effect"] | None = None,
    beta: float | Literal["auto"] | None = None,
    coefficient: float | None = None,
    layers: Literal["auto", "file"] | tuple[int, int] | None = None,
    scale: Literal["unit", "file"] | None = None,
    config: str | os.PathLike[str] = DEFAULT_CONFIG,
    overrides: Sequence[str] | Mapping[str, object] = (),
    results_dir: str | os.PathLike[str] | None = None,
    lm: LoadedModel | None = None,
    embedder: SentenceTransformer | None = None,
    progress: Callable[[str], None] | None = print,
    **options: object,
) -> Result:
    """Steer ``model`` with ``vectors`` (or the suite's own probe directions), score the
    texts and judge the criteria: one Phase 5 run, logged to MLflow like ``steer-eval run``.

    - ``model``: a Hub id, a model folder or a ``.gguf`` (default: the config's, the
      embedded Gemma 3 270M); ``lm``: that model already loaded
      (``steering.models.load_model``), so a notebook does not load it twice.
    - ``vectors``: a vector file or folder (any format ``steering/vector_files.py``
      reads, GGUF control vectors included), or ``{concept: vector}`` where a vector is
      an array (the run's layer), ``{layer: array}``, a repeng ``ControlVector`` or an
      EasySteer ``StatisticalControlVector`` (``.directions``, ``.model_type``); one control
      vector alone is the vector of the one concept ``concepts`` names. Objects are
      written to a file first, as their own GGUF export would be (``vectors.py``).
    - ``concepts``: a number (the config's first N), or concept names or synset ids;
      default: the vectors' concepts, else the config's. One concept alone is evaluated
      without what needs another concept's texts (Δ's reference gap, the likelihood
      contrast, the other-concept nulls): the answer names each as not evaluable.
    - ``layer``: the run's layer, or ``auto``/``auto-effect`` (chosen as ``--layer``
      chooses); ``beta``: strength 1 adds β × the layer's median residual norm, to a
      normalised vector; ``coefficient`` (with ``scale="file"``, implied): the file's own
      vectors × k, repeng's ``set_control(vector, k)``; ``layers``: ``"file"`` steers every
      layer a GGUF holds, ``(i, j)`` a range (docs/vectors.md, "Vectors as deployed").
    - ``config``, ``overrides`` (``--set`` strings or ``{dotted key: value}``) and
      ``**options`` (top-level config keys, a section as a mapping:
      ``generation={"max_new_tokens": 20}``): any other setting.
    - ``progress``: where the run's progress lines go (``None``: nowhere).

    Raises :class:`~steer_eval.errors.ArgumentError` (a ``ValueError``) for bad input,
    naming the argument and the fix, before anything loads.
    """
    from experiments.config import load_config

    say = progress or (lambda _message: None)
    rule = _check_layer(layer)
    settings = _settings(
        model, concepts, layer if rule is None else None, config, overrides, results_dir, options
    )
    # the concept file and results folder, before the steering keys that need the vectors
    base = load_config(settings.config, settings.overrides(), "phase5")
    _steering(settings, vectors, beta, coefficient, layers, scale)
    _vectors(settings, base, vectors, concepts, say)
    cfg = load_config(settings.config, settings.overrides(), "phase5")
    _check_texts(cfg)
    if lm is not None:
        _check_lm(lm, cfg)
    return _run(settings, cfg, rule, lm, embedder, say)


def _check_layer(layer: object) -> str | None:
    """The layer rule (``auto``, ``auto-effect``) or None for a number; else an error."""
    if layer is None or (isinstance(layer, int) and not isinstance(layer, bool)):
        return None
    if isinstance(layer, str) and layer in LAYER_RULES:
        return layer
    raise ArgumentError(
        f"layer: {layer!r} is not a layer; give the decoder layer's number (0-based), or "
        "'auto' (the best probe layer) or 'auto-effect' (the layer that steers most)"
    )


def _settings(
    model: object,
    concepts: object,
    layer: object,
    config: object,
    overrides: Sequence[str] | Mapping[str, object],
    results_dir: object,
    options: Mapping[str, object],
) -> Settings:
    """The command line's options and ``--set`` list for the call's own arguments."""
    if not isinstance(config, str | os.PathLike):
        raise ArgumentError(
            f"config: give the path of a YAML config (configs/phase5.yaml), not "
            f"{type(config).__name__}; change its settings with overrides= or options"
        )
    path = Path(config)
    if not path.is_file():
        raise ArgumentError(
            f"config: no file {path} here ({Path.cwd()}); run from the project's root, or "
            "pass config='<project>/configs/phase5.yaml'"
        )
    settings = Settings(path)
    if model is not None:
        if not isinstance(model, str | os.PathLike) or not str(model):
            raise ArgumentError(
                f"model: give a Hub id, a model folder or a .gguf path as a string, not "
                f"{model!r}; pass a loaded model as lm= beside it"
            )
        settings.model = str(model)
    if isinstance(layer, int):
        if layer < 0:
            raise ArgumentError(f"layer: {layer} is negative; give a 0-based decoder layer")
        settings.layer = layer
    if isinstance(concepts, int) and not isinstance(concepts, bool):
        if concepts < 1:
            raise ArgumentError(f"concepts: {concepts}; give a number ≥ 1 or concept names")
        settings.limit = concepts
    elif concepts is not None and not isinstance(concepts, str | Sequence):
        raise ArgumentError(
            f"concepts: give a number or concept names (['herb.n.01', 'person']), not "
            f"{type(concepts).__name__}"
        )
    if results_dir is not None:
        if not isinstance(results_dir, str | os.PathLike):
            raise ArgumentError(f"results_dir: give a folder path, not {results_dir!r}")
        settings.results_dir = str(results_dir)
    settings.add_all(given_overrides(overrides), "overrides")
    settings.add_all(option_overrides(options, OWN), _keyword)
    return settings


def _keyword(text: str) -> str:
    """The keyword argument an override of ``**options`` came from (``generation=``)."""
    return "the keyword " + text.split("=", 1)[0].split(".", 1)[0]


def _steering(
    settings: Settings,
    vectors: object,
    beta: object,
    coefficient: object,
    layers: object,
    scale: object,
) -> None:
    """``beta``, ``coefficient``, ``layers``, ``scale`` as ``steering.*`` overrides,
    with the combinations the config refuses said in the call's words."""
    if beta is not None and coefficient is not None:
        raise ArgumentError(
            "beta and coefficient: give one. beta scales a normalised vector (β × the "
            "layer's median residual norm); coefficient scales the file's own vectors "
            "(repeng's set_control(vector, k)), β = k·‖v‖/α at the run's layer"
        )
    if scale is not None and scale not in ("unit", "file"):
        raise ArgumentError(f"scale: {scale!r}; give 'unit' (normalised, × β) or 'file'")
    if coefficient is not None:
        if isinstance(coefficient, bool) or not isinstance(coefficient, int | float):
            raise ArgumentError(f"coefficient: give a number > 0, not {coefficient!r}")
        if coefficient <= 0:
            raise ArgumentError(
                f"coefficient: {coefficient}; give k > 0 (the sign comes from the strengths: "
                "s = -1 adds -k·v, as set_control(vector, -k))"
            )
        if scale == "unit":
            raise ArgumentError(
                "coefficient with scale='unit': a coefficient scales the file's own norms; "
                "pass scale='file' (or leave it out), or beta= for normalised vectors"
            )
        scale = "file"
    if beta is not None:
        if scale == "file":
            raise ArgumentError(
                "beta with scale='file': the file's own norms × coefficient are steered and β "
                "is not used; pass coefficient= instead"
            )
        if beta != "auto" and (isinstance(beta, bool) or not isinstance(beta, int | float)):
            raise ArgumentError(f"beta: give a number > 0 (0.2) or 'auto', not {beta!r}")
        settings.add(override("steering.beta", beta), "beta")
    if layers is not None:
        ok = layers in ("auto", "file") or (
            isinstance(layers, tuple | list)
            and len(layers) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) for n in layers)
        )
        if not ok:
            raise ArgumentError(
                f"layers: {layers!r}; give 'file' (every layer the GGUF holds), (i, j) (its "
                "layers i to j, both included) or 'auto' (the run's layer alone)"
            )
    deployed = (layers not in (None, "auto")) or scale == "file" or coefficient is not None
    if deployed and vectors is None:
        raise ArgumentError(
            "layers, scale and coefficient steer a vector file as deployed (its layers, its "
            "norms): pass vectors= (a GGUF control vector, or vectors per layer)"
        )
    if layers is not None:
        settings.add(override("steering.layers", layers), "layers")
    if scale is not None:
        by = "scale" if coefficient is None else "coefficient"  # coefficient implies file
        settings.add(override("steering.scale", scale), by)
    if coefficient is not None:
        settings.add(override("steering.coefficient", coefficient), "coefficient")


def _vectors(
    settings: Settings,
    base: RunConfig,
    vectors: object,
    concepts: object,
    say: Callable[[str], None],
) -> None:
    """``vectors`` and ``concepts`` as ``steering.vector_file`` and ``concepts.synsets``:
    a path as it is, an object written to a file first (``vectors.stage``)."""
    from experiments.concepts import load_concepts

    named = None
    if isinstance(concepts, str):
        concepts = [concepts]
    if vectors is None and (concepts is None or isinstance(concepts, int)):
        return  # nothing to resolve against the concept file
    known = Concepts.of(base.concepts.file, load_concepts(base.concepts.file))
    if concepts is not None and not isinstance(concepts, int):
        assert isinstance(concepts, Sequence)
        if not concepts:
            raise ArgumentError("concepts: the list is empty; name at least one concept")
        for c in concepts:
            if not isinstance(c, str):
                raise ArgumentError(f"concepts: {c!r} is not a concept name or synset id")
        named = list(dict.fromkeys(known.require(c, "concepts") for c in concepts))
    if vectors is not None:
        if isinstance(concepts, int) and not isinstance(vectors, str | os.PathLike):
            raise ArgumentError(
                "concepts: a number takes the config's first N concepts, but these vectors "
                "name their own; leave concepts out, or list the concepts to evaluate"
            )
        if isinstance(vectors, str | os.PathLike):
            path = Path(vectors)
            if not path.exists():
                raise ArgumentError(
                    f"vectors: no file or folder {path} here ({Path.cwd()}); give a vector "
                    "file (.gguf, .safetensors, .pt, .npz, .npy) or a folder of them"
                )
            folder = str(vectors)
            if named is None and not isinstance(concepts, int):
                named = concepts_of_file(path, known)
        elif isinstance(vectors, Mapping) or is_control_vector(vectors):
            items = entries(vectors, named, known)
            named = [item.synset for item in items]
            staged = stage(items, base.results_dir)
            say(f"vectors: {len(items)} concepts written to {staged} (steering.vector_file)")
            folder = str(staged)
        else:
            raise ArgumentError(
                f"vectors: {type(vectors).__name__} is not a vector file or folder, a "
                "mapping {concept: vector} or a control vector (.directions by layer)"
            )
        settings.add(override("steering.vector_source", "file"), "vectors")
        settings.add(override("steering.vector_file", folder), "vectors")
    if named is not None:
        settings.add(override("concepts.synsets", named), "concepts")
        limit = settings.limit if settings.limit is not None else base.concepts.limit
        if limit is not None and limit < len(named):
            settings.add(override("concepts.limit", None), "concepts")


def _check_texts(cfg: RunConfig) -> None:
    """The run's likelihood texts (Δ's reference texts, built for every run when it is
    scored) made now, in milliseconds: a concept they cannot be made for (too few
    sentence frames fit it) fails here, not after the texts are generated. A concept no
    other concept's text can pair with (one concept alone) is evaluated without the
    contrasts that need them (``LikelihoodTexts.unpaired``; the answer says which)."""
    from experiments.concepts import load_concepts
    from experiments.likelihood_texts import build_likelihood_texts
    from experiments.prompts import PromptError

    c = cfg.concepts
    graph = load_concepts(c.file, limit=c.limit, synsets=c.synsets)
    try:
        build_likelihood_texts(graph, cfg.likelihood.texts, cfg.seed, unpaired=True)
    except PromptError as exc:
        raise ArgumentError(
            f"concepts: {', '.join(graph.synsets)} cannot be evaluated: {exc}; add "
            f"narrower or broader terms to the concept in {c.file}, or choose another"
        ) from None


def _check_lm(lm: LoadedModel, cfg: RunConfig) -> None:
    """A loaded model must be the config's: the record names the config's model."""
    spec = lm.info.get("spec")
    if spec is not None and str(spec) != cfg.model:
        raise ArgumentError(
            f"lm: loaded from {spec!r}, but the run's model is {cfg.model!r}; pass "
            f"model={spec!r} beside lm, or leave lm out to load the model"
        )


def _run(
    settings: Settings,
    cfg: RunConfig,
    rule: str | None,
    lm: LoadedModel | None,
    embedder: SentenceTransformer | None,
    say: Callable[[str], None],
) -> Result:
    """The run, as ``steer-eval run`` makes it: β kept by the command's rule, the layer
    chosen by its rule, then the one runner; its command line tagged on the MLflow run."""
    from experiments import tracking
    from experiments.config import Phase5Config
    from experiments.kernel.layers import resolve_layer
    from experiments.phase5.run import run_phase5
    from experiments.strength_range import kept_keys

    assert isinstance(cfg, Phase5Config)  # load_config(..., "phase5") reads that model
    explicit = kept_keys(settings.sets, cfg, settings.config)
    choice = None
    if rule is not None:
        cfg, lm, found_embedder, choice = resolve_layer(cfg, rule, say, explicit)
        embedder = embedder or found_embedder
    command = settings.command(rule)
    say(f"the same run from the command line: {command}")
    done = run_phase5(cfg, lm=lm, embedder=embedder, progress=say, explicit=explicit,
                      layer_choice=choice)  # fmt: skip
    tracking.set_tags(done.run_id, {EVALUATE_TAG: command})
    return result_of(done.run_id, done.results_dir, done.record, command)
