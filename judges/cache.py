"""Content-addressed disk cache of judge answers, so a rerun costs nothing.

Key = sha256 over (provider, model, rubric version, rendered prompt, decoding params), in
the spirit of Inspect AI's model-call cache. Anything that can change an answer is in the
key; nothing secret is (API keys never reach this module). Entries are single JSON files,
written atomically, so concurrent writers and interrupted runs cannot leave a torn entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steering.files import temp_beside

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    """`$STEER_EVAL_CACHE/judge-cache` (the suite's cache folder), else `.cache/judge-cache`."""
    return Path(os.environ.get("STEER_EVAL_CACHE", ".cache")).expanduser() / "judge-cache"


def cache_key(
    provider: str,
    model: str,
    rubric_version: str,
    prompt: str,
    params: Mapping[str, Any],
) -> str:
    """sha256 hex digest identifying one judge call."""
    material = json.dumps(
        {
            "format": CACHE_FORMAT,
            "provider": provider,
            "model": model,
            "rubric_version": rubric_version,
            "prompt": prompt,
            "params": dict(params),
        },
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


class JudgeCache:
    """Thread-safe directory of `<key[:2]>/<key>.json` entries with hit/miss counters."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def _read(self, key: str) -> dict[str, Any] | None:
        try:
            with self._path(key).open(encoding="utf-8") as handle:
                loaded = json.load(handle)
        except (OSError, ValueError):
            return None
        return loaded if isinstance(loaded, dict) and loaded.get("key") == key else None

    def peek(self, key: str) -> bool:
        """Whether a valid entry exists, without counting a hit or miss (for dry runs)."""
        return self._read(key) is not None

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored entry, or None (a corrupt entry counts as a miss and is ignored)."""
        entry = self._read(key)
        with self._lock:
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
        return entry

    def put(self, key: str, entry: Mapping[str, Any]) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {**entry, "key": key, "format": CACHE_FORMAT}
        fd, tmp = temp_beside(path, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(payload, handle, ensure_ascii=False, indent=1, default=str)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json")) if self.root.exists() else 0

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses}

    def __repr__(self) -> str:
        return f"JudgeCache(root={str(self.root)!r}, hits={self.hits}, misses={self.misses})"


def resolve_cache(cache: JudgeCache | str | os.PathLike[str] | bool | None) -> JudgeCache | None:
    """Normalise a judge's `cache` option: True -> default dir, False/None -> off."""
    if cache is True:
        return JudgeCache()
    if cache is False or cache is None:
        return None
    if isinstance(cache, JudgeCache):
        return cache
    return JudgeCache(cache)
