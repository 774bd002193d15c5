"""What a model spec would load as, read from its config alone: no weights.

A dry run must refuse what the real run would refuse (a model that is not here, a layer
it does not have, a dtype its device cannot compute in) and show what the run would use,
in seconds and without memory; it reads the same resolution and checks as
:func:`steering.models.load_model`, so the two cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from steering.models import (
    ModelSpec,
    ModelSpecError,
    check_layer_index,
    dummy_config,
    pick_device,
    pick_dtype,
    probe_id_of,
    resolve_model,
    text_config,
)
from steering.vector_files import ModelKind


@dataclass(frozen=True)
class ModelFacts:
    """A model as its config describes it, on the device and dtype a run would use."""

    spec: str
    model_id: str  # as the loader names it (probes and earlier runs carry it)
    found_in: str  # embedded, gguf, directory, models folder, hub cache, hub, dummy config
    source: str
    architecture: str
    device: torch.device
    dtype: torch.dtype
    n_layers: int
    hidden_size: int
    vocab_size: int
    kind: ModelKind = field(default_factory=ModelKind)  # the type a vector's hint names

    @property
    def model_type(self) -> str:
        """``config.model_type`` (``gemma3_text``): what repeng's and our exports'
        ``controlvector.model_hint`` holds."""
        return self.kind.model_type

    @property
    def default_layer(self) -> int:
        return self.n_layers // 2  # as LoadedModel.default_layer

    def check_layer(self, layer: int | None) -> int:
        """The layer a run would steer (``None``: the middle one), or LayerIndexError."""
        if layer is None:
            return self.default_layer
        return check_layer_index(layer, self.n_layers, self.model_id)

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def probe_id(self) -> str:
        """The id this model's probes and strength ranges carry (``LoadedModel.probe_id``)."""
        return probe_id_of(self.model_id, self.dtype)


def _config_source(spec: str, load_format: str) -> tuple[str, dict[str, Any], str, str, str]:
    """(what AutoConfig reads, its kwargs, model id, where found, source) for a spec."""
    if load_format == "dummy":
        config_file, name = dummy_config(spec)
        return str(config_file), {}, f"dummy:{name}", "dummy config", str(config_file)
    if load_format != "auto":
        raise ModelSpecError(f"unknown load format {load_format!r}; use auto or dummy")
    found = resolve_model(spec)
    return found.source, found.load_kwargs, found.model_id, found.where, found.source


def probe_id_of_spec(model: ModelSpec) -> str:
    """The probe id a spec's model would load as (its id, and its dtype unless fp32),
    from where the spec resolves alone: no config read, no weights. The errors of
    :func:`read_model` for a model that is not here or a dtype its device cannot run."""
    dev = pick_device(model.device)
    _source, _kwargs, model_id, _where, _shown = _config_source(model.spec, model.load_format)
    return probe_id_of(model_id, pick_dtype(dev, model.dtype))


def read_model(model: ModelSpec) -> ModelFacts:
    """The model a config's model section would load, from its config: ModelSpecError
    when it is not here (with the download line), DtypeError when its device cannot
    compute in the dtype."""
    from transformers import AutoConfig

    spec, load_format = model.spec, model.load_format
    dev = pick_device(model.device)
    torch_dtype = pick_dtype(dev, model.dtype)
    source, kwargs, model_id, where, shown = _config_source(spec, load_format)
    try:
        config = AutoConfig.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelSpecError(
            f"could not read the config of model {spec!r} ({source}): "
            f"{exc.__class__.__name__}: {str(exc).splitlines()[0]}"
        ) from exc
    text = text_config(config)
    architectures = getattr(config, "architectures", None) or [type(config).__name__]
    if load_format == "auto" and Path(source).is_dir() and where == "gguf":
        shown = str(Path(source) / kwargs.get("gguf_file", ""))
    return ModelFacts(
        spec=spec,
        model_id=model_id,
        found_in=where,
        source=shown,
        architecture=str(architectures[0]),
        device=dev,
        dtype=torch_dtype,
        n_layers=int(text.num_hidden_layers),
        hidden_size=int(text.hidden_size),
        vocab_size=int(text.vocab_size),
        kind=ModelKind.of(config),
    )
