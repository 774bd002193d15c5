"""Does an export steer llama.cpp as the run's hook steered the model? (``export --check``)

For each exported concept file (or a fixed sample of them), the file's vector is added
at both signs, ±1 times the exported tensor (which is already scaled α·β: the run's
strengths s = ±1), once by llama.cpp (``llama_set_adapter_cvec`` on the model's GGUF,
exactly the buffer ``--control-vector`` builds) and once by this suite's hook on the Hugging
Face model (``steering.likelihood.steered_loglik``, the likelihood outcome's scorer). On
a few fixed texts, teacher-forced with the same token ids in both, each side's shift is
the mean per-token NLL steered minus unsteered. The quantised GGUF (Q4_K_M for the
embedded model) and the fp32 model give different NLL levels, so only the shifts are
compared: their Pearson r across texts × signs × concepts, and the slope of llama.cpp's
shift on the hook's (1 when both add the same vector at the same block). The check
passes when r ≥ ``threshold`` (default 0.95).

A file of several layers (a run that steered a vector file as deployed: every layer it
holds, or a range) is applied whole on both sides: llama.cpp's buffer holds each
``direction.<N>`` in its row N − 1 (the rows between them zero, the range the file's
lowest to highest layer, both included), and the hook adds each at its block in the
same pass (``steering.vector.steer_layers``), so the two agree only when every layer
and its scale do.

The texts are the run's likelihood texts (``likelihood_texts.json``, or rebuilt from the
run's concept graph and seed as the likelihood stage builds them): per concept, its
first ``texts`` on-concept texts and their paired off-concept texts.

Every file is validated against the GGUF's block count and width before llama.cpp loads
(``steering.vector_files.check_for_llama_cpp``), and llama.cpp is loaded as the local
judge loads it (``judges.llama_runtime``: a crash-isolated first decode, never the AMX path).
"""

from __future__ import annotations

import ctypes
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from steering.models import LoadedModel
from steering.vector import Layers
from steering.vector_files import VectorFileError, check_for_llama_cpp

CHECK_FILE = "check.json"
CHECK_FORMAT = "steer-eval/export-check"
THRESHOLD = 0.95
TEXTS_PER_CONCEPT = 3  # on-concept texts per concept, each with its paired off-concept text
SIGNS = (1.0, -1.0)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Shift:
    """One text under one concept's vector at one sign: ΔNLL (steered − unsteered, nats
    per token) under the hook and under llama.cpp."""

    concept: str
    sign: float
    text: str
    hook: float
    llama: float


@dataclass(frozen=True)
class Agreement:
    """Pearson r of llama.cpp's shifts with the hook's, and the least-squares slope of
    llama.cpp's on the hook's, over ``n`` shifts."""

    r: float
    slope: float
    n: int

    @classmethod
    def of(cls, shifts: Sequence[Shift]) -> Agreement:
        x = np.array([s.hook for s in shifts], dtype=np.float64)
        y = np.array([s.llama for s in shifts], dtype=np.float64)
        if len(x) < 3 or x.std() == 0 or y.std() == 0:
            return cls(float("nan"), float("nan"), len(x))
        r = float(np.corrcoef(x, y)[0, 1])
        return cls(r, float(np.polyfit(x, y, 1)[0]), len(x))


@dataclass(frozen=True)
class ExportCheck:
    """The check's result, written to ``check.json`` in the export folder."""

    folder: Path
    gguf: Path
    model_id: str
    layer: int
    threshold: float
    layers: list[int]  # every layer the checked files steer
    concepts: list[str]
    texts: dict[str, list[str]]
    shifts: list[Shift]
    overall: Agreement
    by_sign: dict[str, Agreement]

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.overall.r) and self.overall.r >= self.threshold)

    def to_dict(self) -> dict[str, object]:
        return {
            "format": CHECK_FORMAT,
            "passed": self.passed,
            "threshold_r": self.threshold,
            "r": self.overall.r,
            "slope": self.overall.slope,
            "n_shifts": self.overall.n,
            "by_sign": {k: asdict(v) for k, v in self.by_sign.items()},
            "gguf": str(self.gguf),
            "model_id": self.model_id,
            "layer": self.layer,
            "layers": self.layers,
            "concepts": self.concepts,
            "texts": self.texts,
            "measure": "mean per-token NLL (nats), steered minus unsteered, teacher-forced on "
            "the same token ids; steered = ±1 × the exported tensors, each at its "
            "direction.<N> (every layer of the file at once), by llama_set_adapter_cvec in "
            "llama.cpp and by the suite's hooks on the HF model",
            "shifts": [asdict(s) for s in self.shifts],
        }


def gguf_shape(path: str | Path) -> tuple[int, int]:
    """A model GGUF's block count and width (``<arch>.block_count``,
    ``<arch>.embedding_length``), read from its header without loading it."""
    from gguf import GGUFReader

    reader = GGUFReader(path)

    def value(key: str) -> Any:
        found = reader.get_field(key)
        if found is None:
            raise VectorFileError(f"{path}: no {key} in the model GGUF; is it a model?")
        return found.contents()

    arch = value("general.architecture")
    return int(value(f"{arch}.block_count")), int(value(f"{arch}.embedding_length"))


def pick_concepts(concepts: Sequence[str], k: int | None) -> list[str]:
    """All concepts, or a fixed sample of ``k`` (seeded, in sorted order)."""
    ordered = sorted(concepts)
    if k is None or k >= len(ordered):
        return ordered
    if k < 1:
        raise ValueError(f"--concepts must be at least 1, got {k}")
    return sorted(random.Random(0).sample(ordered, k))


def set_cvec(llm: Any, directions: Mapping[int, np.ndarray] | None, sign: float = 1.0) -> None:
    """Put ``sign`` × a control vector's directions on ``llm``'s context, laid out as
    llama.cpp's ``--control-vector`` lays them out (row N−1 holds ``direction.N``); None
    clears it."""
    import llama_cpp

    n_embd = int(llm.n_embd())
    if not directions:
        rc = llama_cpp.llama_set_adapter_cvec(llm.ctx, None, 0, n_embd, -1, -1)
    else:
        top = max(directions)
        buf = np.zeros(top * n_embd, dtype=np.float32)
        for n, v in directions.items():
            buf[(n - 1) * n_embd : n * n_embd] = sign * np.asarray(v, dtype=np.float32)
        data = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        rc = llama_cpp.llama_set_adapter_cvec(llm.ctx, data, buf.size, n_embd, min(directions), top)
    if rc != 0:
        raise RuntimeError(f"llama_set_adapter_cvec failed with {rc}")


def llama_nll(llm: Any, ids: Sequence[int], n_prefix: int) -> float:
    """Teacher-forced mean NLL of ``ids[n_prefix:]`` given what precedes each token."""
    llm.reset()
    llm.eval(list(ids))
    logits = np.asarray(llm.scores[n_prefix - 1 : len(ids) - 1], dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    target = logits[np.arange(len(logits)), list(ids[n_prefix:])]
    return float(np.mean(lse - target))


def check_export(
    folder: str | Path,
    lm: LoadedModel | Callable[[], LoadedModel],
    gguf: str | Path,
    texts: Mapping[str, Sequence[str]],
    concepts: int | None = None,
    threshold: float = THRESHOLD,
    threads: int | None = None,
    progress: Progress | None = None,
) -> ExportCheck:
    """Compare the NLL shifts of an export's files in llama.cpp with the hook's (see the
    module docstring); ``texts[c]`` are the texts scored for concept c. ``lm`` may be a
    loader, called once the files are found usable by llama.cpp (a refusal costs no model
    load). Writes ``check.json`` into ``folder``."""
    import torch

    from experiments.phase5.export import MANIFEST
    from judges.llama_runtime import check_decodes, open_llama
    from steering.likelihood import LikelihoodRow, encode_texts, steered_loglik

    folder, gguf = Path(folder), Path(gguf)
    manifest_path = folder / MANIFEST
    if not manifest_path.exists():
        raise FileNotFoundError(f"{folder}: no {MANIFEST}; export the run there first")
    manifest = json.loads(manifest_path.read_text())
    files: dict[str, str] = manifest["gguf"]
    chosen = pick_concepts(list(files), concepts)
    missing = [c for c in chosen if not texts.get(c)]
    if missing:
        raise ValueError(f"no texts to score for {', '.join(missing[:3])}")
    if not gguf.exists():
        raise FileNotFoundError(f"{gguf}: no such model GGUF; pass --gguf")
    n_layer, n_embd = gguf_shape(gguf)
    vectors = {c: check_for_llama_cpp(folder / files[c], n_layer, n_embd) for c in chosen}
    lm = lm if isinstance(lm, LoadedModel) else lm()
    if (n_layer, n_embd) != (lm.n_layers, lm.hidden_size):
        raise VectorFileError(
            f"{gguf} has {n_layer} blocks of width {n_embd}, but the run's model has "
            f"{lm.n_layers} of {lm.hidden_size}: pass the GGUF of the run's model (--gguf)"
        )
    layers = sorted({n for cv in vectors.values() for n in cv.directions})
    layer = int(manifest.get("layer", layers[0]))

    # The texts, tokenised once by the HF tokenizer; llama.cpp is fed the same ids.
    all_texts = sorted({t for c in chosen for t in texts[c]})
    index = {t: i for i, t in enumerate(all_texts)}
    encoded = encode_texts(lm, all_texts)
    total = len(chosen) * (1 + len(SIGNS)) * 2
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress("NLL shifts: hook and llama.cpp", done, total)

    # The hook: rows (concept, 0 / +1 / −1) over the concept's texts, in one call, every
    # layer of the concept's file hooked at once.
    hook: dict[tuple[str, float], np.ndarray] = {}
    for c in chosen:
        directions = vectors[c].directions
        held = sorted(directions)
        stack = torch.stack([torch.from_numpy(directions[n]) for n in held])
        steer: Layers = held[0] if len(held) == 1 else tuple(held)
        added = stack if len(held) == 1 else stack[None]  # [1, hidden] or [1, layers, hidden]
        idx = tuple(index[t] for t in texts[c])
        rows = [LikelihoodRow(0, s, idx) for s in (0.0, *SIGNS)]
        scored = steered_loglik(lm, encoded, rows, added, steer)
        for s, values in zip((0.0, *SIGNS), scored, strict=True):
            hook[(c, s)] = -np.asarray(values)
            tick()

    # llama.cpp: the same ids, the file's directions as --control-vector applies them.
    check_decodes(gguf)
    longest = max(len(e.ids) for e in encoded)
    llm = open_llama(
        gguf,
        n_ctx=max(64, -(-longest // 64) * 64),
        n_batch=max(64, longest),
        n_threads=threads or torch.get_num_threads(),
        logits_all=True,
        seed=0,
        verbose=False,
    )
    llama: dict[tuple[str, float], np.ndarray] = {}
    try:
        base: dict[int, float] = {}
        set_cvec(llm, None)
        for c in chosen:
            for i in (index[t] for t in texts[c]):
                if i not in base:
                    base[i] = llama_nll(llm, encoded[i].ids, len(encoded[i].prefix))
            llama[(c, 0.0)] = np.array([base[index[t]] for t in texts[c]])
            tick()
        for c in chosen:
            for s in SIGNS:
                set_cvec(llm, vectors[c].directions, s)
                llama[(c, s)] = np.array(
                    [
                        llama_nll(llm, encoded[index[t]].ids, len(encoded[index[t]].prefix))
                        for t in texts[c]
                    ]
                )
                tick()
        set_cvec(llm, None)
    finally:
        llm.close()

    shifts = [
        Shift(
            c,
            s,
            t,
            float(hook[(c, s)][j] - hook[(c, 0.0)][j]),
            float(llama[(c, s)][j] - llama[(c, 0.0)][j]),
        )
        for c in chosen
        for s in SIGNS
        for j, t in enumerate(texts[c])
    ]
    result = ExportCheck(
        folder=folder,
        gguf=gguf,
        model_id=str(manifest.get("model_id", "")),
        layer=layer,
        threshold=threshold,
        layers=layers,
        concepts=chosen,
        texts={c: list(texts[c]) for c in chosen},
        shifts=shifts,
        overall=Agreement.of(shifts),
        by_sign={f"{s:+g}": Agreement.of([x for x in shifts if x.sign == s]) for s in SIGNS},
    )
    (folder / CHECK_FILE).write_text(json.dumps(result.to_dict(), indent=1))
    return result


def run_texts(run_dir: Any, n: int = TEXTS_PER_CONCEPT) -> dict[str, list[str]]:
    """Per concept: the run's first ``n`` on-concept likelihood texts and their paired
    off-concept texts (``phase5/likelihood.texts_for``: the folder's copy, else rebuilt)."""
    from experiments.kernel.lifecycle import load_graph
    from experiments.phase5.likelihood import texts_for

    config = run_dir.read_record(migrate=True).config
    found = texts_for(run_dir, config, load_graph(config))
    return {c: [*found.on[c][:n], *found.off[c][:n]] for c in found.on}


def gguf_for(model_id: str) -> Path | None:
    """The GGUF llama.cpp loads for a run's model: the embedded model's own, a ``.gguf``
    spec itself, else None (pass --gguf)."""
    from steering.models import EMBEDDED

    if model_id == EMBEDDED or model_id.startswith(f"{EMBEDDED}:"):
        from steering.assets import embedded_gguf_path

        return embedded_gguf_path()
    return Path(model_id) if model_id.endswith(".gguf") else None
