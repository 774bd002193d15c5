"""The content-addressed judge cache."""

from __future__ import annotations

import json
import threading

from judges.cache import JudgeCache, cache_key, default_cache_dir, resolve_cache

BASE = {
    "provider": "openai",
    "model": "gpt-4o-mini",
    "rubric_version": "relatedness-v1",
    "prompt": "rate this",
    "params": {"temperature": 0.0, "max_tokens": 20},
}


def _key(**changes):
    args = {**BASE, **changes}
    return cache_key(
        args["provider"], args["model"], args["rubric_version"], args["prompt"], args["params"]
    )


def test_key_is_stable_and_covers_every_input():
    assert _key() == _key()
    assert len(_key()) == 64
    variants = [
        _key(provider="anthropic"),
        _key(model="gpt-4o"),
        _key(rubric_version="v2"),
        _key(prompt="rate this!"),
        _key(params={"temperature": 0.5, "max_tokens": 20}),
    ]
    assert len({_key(), *variants}) == 6
    # parameter order does not matter
    assert _key(params={"max_tokens": 20, "temperature": 0.0}) == _key()


def test_put_get_counts_hits_and_misses(tmp_path):
    cache = JudgeCache(tmp_path)
    key = _key()
    assert cache.get(key) is None
    cache.put(key, {"score": 7.0, "raw": '{"score": 7}'})
    entry = cache.get(key)
    assert entry is not None and entry["score"] == 7.0 and entry["key"] == key
    assert cache.stats() == {"hits": 1, "misses": 1}
    assert len(cache) == 1
    assert (tmp_path / key[:2] / f"{key}.json").exists()


def test_peek_does_not_count(tmp_path):
    """Dry runs look into the cache without skewing the run's hit/miss statistics."""
    cache = JudgeCache(tmp_path)
    key = _key()
    assert cache.peek(key) is False
    cache.put(key, {"score": 7.0})
    assert cache.peek(key) is True
    (tmp_path / key[:2] / f"{key}.json").write_text("{ torn")
    assert cache.peek(key) is False  # a corrupt entry is no hit, for peek as for get
    assert cache.stats() == {"hits": 0, "misses": 0}


def test_survives_a_new_instance(tmp_path):
    JudgeCache(tmp_path).put(_key(), {"score": 3.0})
    assert JudgeCache(tmp_path).get(_key())["score"] == 3.0


def test_corrupt_or_mismatched_entries_are_misses(tmp_path):
    cache = JudgeCache(tmp_path)
    key = _key()
    path = tmp_path / key[:2] / f"{key}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{ torn write")
    assert cache.get(key) is None
    path.write_text(json.dumps({"key": "something else", "score": 1}))
    assert cache.get(key) is None
    assert cache.misses == 2


def test_concurrent_writers_leave_valid_entries(tmp_path):
    cache = JudgeCache(tmp_path)

    def write(i):
        for j in range(20):
            cache.put(_key(prompt=str(j)), {"score": float(j), "writer": i})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 20
    assert all(cache.get(_key(prompt=str(j)))["score"] == float(j) for j in range(20))
    assert not list(tmp_path.rglob(".tmp-*"))


def test_resolve_cache_options(tmp_path, monkeypatch):
    monkeypatch.setenv("STEER_EVAL_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "judge-cache"
    assert resolve_cache(True).root == tmp_path / "judge-cache"
    assert resolve_cache(False) is None and resolve_cache(None) is None
    assert resolve_cache(tmp_path / "x").root == tmp_path / "x"
    existing = JudgeCache(tmp_path)
    assert resolve_cache(existing) is existing
