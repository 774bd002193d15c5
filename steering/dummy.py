"""Random-weight models from a config file, for measuring without weights.

Like vLLM's ``load_format=dummy``: the architecture, shapes and dtype of a real model,
its weights drawn by transformers' own initialisation from a fixed seed, so
``make bench --device cuda`` and a CUDA smoke run of the pipeline need no download. The
texts are noise; the timings, memory and code paths are the real model's.

A spec names the config: a model shipped in ``steering/model_configs/`` (by file name or
hub id: ``gemma-3-4b-pt`` or ``google/gemma-3-4b-pt``), a ``.json`` file, a model folder
with a ``config.json``, or ``embedded``. The tokenizer is the folder's own when it has
one, else the embedded Gemma 3 tokenizer: the same vocabulary family as Gemma 3 4B (its
262,144 entries are the first of the 4B's 262,208 output rows; the 4B's own tokenizer
adds ``<image_soft_token>`` at 262,144, and the rest are unused). Random weights put
some mass on the rows past the tokenizer, which decode to nothing: a dummy model's
texts are shorter than its token counts, and noise either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from steering.assets import require_embedded_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

MODEL_CONFIGS = Path(__file__).with_name("model_configs")
DUMMY_SEED = 0
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


class DummySpecError(ValueError):
    """The spec names no config file; the message lists what does."""


def shipped_configs() -> list[str]:
    return sorted(p.stem for p in MODEL_CONFIGS.glob("*.json"))


def resolve_config(spec: str) -> tuple[Path, str]:
    """The config file a dummy spec names, and the model's short name."""
    path = Path(spec).expanduser()
    if spec == "embedded":
        return require_embedded_model() / "config.json", "embedded-gemma-3-270m"
    if path.is_dir() and (path / "config.json").is_file():
        return path / "config.json", path.name
    if path.suffix == ".json" and path.is_file():
        return path, path.stem
    shipped = MODEL_CONFIGS / f"{spec.rstrip('/').split('/')[-1]}.json"
    if shipped.is_file():
        return shipped, shipped.stem
    raise DummySpecError(
        f"no model config for {spec!r}: give a .json config file, a model folder with a "
        f"config.json, 'embedded', or a shipped config ({', '.join(shipped_configs())})"
    )


def dummy_tokenizer(config_file: Path) -> tuple[PreTrainedTokenizerBase, str]:
    """The config folder's tokenizer when it has one, else the embedded Gemma 3's."""
    from transformers import AutoTokenizer

    folder = config_file.parent
    if folder != MODEL_CONFIGS and any((folder / f).is_file() for f in _TOKENIZER_FILES):
        return AutoTokenizer.from_pretrained(folder), str(folder)
    return AutoTokenizer.from_pretrained(require_embedded_model()), "embedded Gemma 3 tokenizer"


def build_dummy(
    config_file: Path, device: torch.device, dtype: torch.dtype, seed: int = DUMMY_SEED
) -> PreTrainedModel:
    """The config's causal-LM class with freshly initialised weights (seeded), built
    directly on ``device``; on ``meta`` nothing is allocated (shapes and counts only)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_file))
    torch.manual_seed(seed)  # also seeds every CUDA device
    with torch.device(device):
        model: PreTrainedModel = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()  # returns the model itself
    return model


def text_vocab(model: PreTrainedModel) -> int:
    return int(model.get_output_embeddings().weight.shape[0])
