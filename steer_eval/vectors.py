"""Vectors handed to :func:`steer_eval.evaluate`, turned into the file a run reads.

A run steers with vectors from a file (``steering.vector_source: file``), checked by the
one reader a CLI run uses (``steering/vector_files.py``). So a Python object is not
handed to the run: it is written once as a folder of per-concept files (a 1-D array as
``<concept>.npy``; vectors per layer, a repeng ``ControlVector`` or an EasySteer
``StatisticalControlVector``, as a repeng-layout ``<concept>.gguf``) and the run is
pointed at that folder. The folder is named by a
digest of its contents and lies beside the run folders (``<results_dir>/vectors/``): the
same vectors give the same path, so the same config hash, and ``steer-eval run --set
steering.vector_file=<that folder>`` is the same run. (It cannot be the run's own folder:
the vectors are read before the run, and so its folder, exists.)
"""

from __future__ import annotations

import difflib
import hashlib
import numbers
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias, cast, runtime_checkable

from steer_eval.errors import ArgumentError

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike

    from experiments.concepts import ConceptGraph


@runtime_checkable
class ControlVectorLike(Protocol):
    """A repeng ``ControlVector`` or anything shaped like it: one concept's direction per
    layer (repeng's layer ids, which are llama.cpp's ``direction.N`` and this suite's
    ``layer: N``) and the model type it was trained on.

    EasySteer's ``StatisticalControlVector`` (``easysteer/steer/utils.py``, what its
    extractors ``extract_diffmean_control_vector`` … return) has this shape too, beside its
    ``method`` and ``metadata``: ``directions`` maps the true decoder-layer id whose output
    was captured (a positional index for nested-list input) to a float32 numpy array, and
    ``export_gguf`` writes each as ``direction.<layer>`` with ``model_type`` as the
    ``model_hint``, as repeng does; so it is written and read as that file would be. Its
    ``model_type`` defaults to ``"unknown"`` (EasySteer consumes it nowhere), which names
    no model: it is written as no hint rather than warned about as another model's."""

    @property
    def directions(self) -> Mapping[int, ArrayLike]: ...

    @property
    def model_type(self) -> str: ...


# One concept's vector: an array (the run's layer), arrays per layer, or a control vector.
Entry: TypeAlias = "ArrayLike | Mapping[int, ArrayLike] | ControlVectorLike"
# What ``vectors=`` takes: a path, a mapping of concept to entry, or one control vector.
Vectors: TypeAlias = "str | os.PathLike[str] | Mapping[str, Entry] | ControlVectorLike"


@dataclass(frozen=True)
class Concepts:
    """The concept file's concepts, resolved by synset id or name as the vector reader
    resolves a vector's name (``steering.vector_files.ConceptNames``)."""

    file: str
    synsets: tuple[str, ...]
    names: tuple[str, ...]

    @classmethod
    def of(cls, file: str, graph: ConceptGraph) -> Concepts:
        return cls(
            file,
            tuple(c.synset for c in graph.concepts),
            tuple(c.name for c in graph.concepts),
        )

    def resolve(self, key: str) -> str | None:
        from steering.vector_files import ConceptNames

        return ConceptNames(self.synsets, self.names).resolve(key)

    def require(self, key: str, argument: str) -> str:
        """``key``'s synset, or an error naming ``argument``, the closest concept and the
        fix."""
        found = self.resolve(key)
        if found is not None:
            return found
        known = [*self.synsets, *self.names]
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ArgumentError(
            f"{argument}: {key!r} is no concept of {self.file}{hint}; name a concept by its "
            f"synset id or name ({', '.join(self.synsets[:6])}"
            f"{', …' if len(self.synsets) > 6 else ''}), or give your own concept file with "
            "overrides={'concepts.file': 'my_concepts.json'} (docs/own-concepts.md)"
        )


def is_control_vector(value: object) -> bool:
    """A repeng-like control vector (duck-typed: ``.directions``), not a plain mapping."""
    return not isinstance(value, Mapping) and hasattr(value, "directions")


def _array(value: object, where: str) -> np.ndarray:
    """``value`` as a finite, non-zero float32 vector, or an error naming ``where``."""
    import numpy as np

    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, RuntimeError) as exc:  # a tensor needing grad, ragged data
        raise ArgumentError(
            f"{where}: cannot be read as an array of numbers ({exc}); pass a numpy array "
            "(a torch tensor: tensor.detach().cpu().numpy())"
        ) from None
    if array.ndim == 2 and 1 in array.shape:
        array = array.reshape(-1)
    if array.ndim != 1:
        raise ArgumentError(
            f"{where}: a vector is 1-D (one value per hidden unit), not of shape "
            f"{array.shape}; for vectors per layer pass {{layer: vector}}"
        )
    if not np.isfinite(array).all():
        raise ArgumentError(f"{where}: has NaN or infinite values")
    if not array.any():
        raise ArgumentError(f"{where}: is all zeros, which has no direction")
    return array


def _layers(directions: Mapping[object, object], where: str) -> dict[int, np.ndarray]:
    """Vectors per layer, checked: integer layers ≥ 1 (llama.cpp's ``direction.N``
    cannot hold block 0's output, so a GGUF cannot either); a numpy integer is a layer."""
    out = {}
    for key, value in directions.items():
        number = isinstance(key, numbers.Integral) and not isinstance(key, bool)
        if not number and not (isinstance(key, str) and key.isdigit()):
            raise ArgumentError(
                f"{where}: layer {key!r} is not a layer number; key vectors per layer by "
                "the decoder block whose output they steer (0-based, as repeng and llama.cpp)"
            )
        layer = int(cast(int | str, key))
        if layer < 1:
            raise ArgumentError(
                f"{where}: layer 0 cannot be written as a control vector (llama.cpp rejects "
                "direction.0); steer block 0 with a 1-D array and layer=0 instead, or leave "
                "it out (EasySteer's extractors key every layer captured, 0 included: "
                "{n: v for n, v in cv.directions.items() if n > 0})"
            )
        out[layer] = _array(value, f"{where}[{layer}]")
    if not out:
        raise ArgumentError(f"{where}: holds no layers")
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class ConceptVectors:
    """One concept's vectors as they will be written: an array, or layers with a hint."""

    synset: str
    vector: np.ndarray | None = None
    layers: dict[int, np.ndarray] | None = None
    hint: str = ""


def _entry(synset: str, value: object, where: str) -> ConceptVectors:
    if is_control_vector(value):
        directions = getattr(value, "directions", None)
        if not isinstance(directions, Mapping):
            raise ArgumentError(
                f"{where}: .directions is {type(directions).__name__}, not a mapping of "
                "layer to vector (as repeng's ControlVector has)"
            )
        from steering.vector_files import NO_MODEL_HINT  # numpy: not at `import steer_eval`

        hint = str(getattr(value, "model_type", "") or "")
        if hint == NO_MODEL_HINT:  # EasySteer's default: no model named, so nothing to check
            hint = ""
        return ConceptVectors(synset, layers=_layers(directions, where), hint=hint)
    if isinstance(value, Mapping):
        return ConceptVectors(synset, layers=_layers(value, where))
    return ConceptVectors(synset, vector=_array(value, where))


def entries(
    vectors: Mapping[str, object] | object, wanted: Sequence[str] | None, concepts: Concepts
) -> list[ConceptVectors]:
    """The concepts' vectors from a mapping (keys resolved to synsets) or one control
    vector (the one concept ``wanted`` names), in the order the run takes them."""
    if not isinstance(vectors, Mapping):  # one control vector: one concept's
        if wanted is None or len(wanted) != 1:
            got = "none" if wanted is None else f"{len(wanted)}"
            raise ArgumentError(
                f"vectors: a control vector holds one concept's vectors, but concepts names "
                f"{got}; pass concepts=['herb.n.01'] (its concept), or "
                "vectors={'herb.n.01': control_vector, ...} for several"
            )
        return [_entry(wanted[0], vectors, "vectors")]
    if not vectors:
        raise ArgumentError("vectors: the mapping is empty; give {concept: vector, ...}")
    by_synset: dict[str, tuple[str, object]] = {}
    for key, value in vectors.items():
        if not isinstance(key, str):
            raise ArgumentError(
                f"vectors: key {key!r} is not a concept name; key vectors by the concept's "
                "synset id or name ('herb.n.01' or 'herb')"
            )
        synset = concepts.require(key, "vectors")
        if synset in by_synset:
            raise ArgumentError(
                f"vectors: {key!r} and {by_synset[synset][0]!r} are both {synset}; keep one"
            )
        by_synset[synset] = (key, value)
    order = list(by_synset) if wanted is None else list(wanted)
    missing = [s for s in order if s not in by_synset]
    if missing:
        raise ArgumentError(
            f"vectors: no vector for {', '.join(missing)}, which concepts names; add them "
            f"to vectors, or leave concepts out to evaluate the vectors' concepts "
            f"({', '.join(by_synset)})"
        )
    return [_entry(s, by_synset[s][1], f"vectors[{by_synset[s][0]!r}]") for s in order]


def _digest(items: Sequence[ConceptVectors]) -> str:
    """A digest of what is written (names, layers, hints, float32 bytes): equal vectors
    give the same folder, so the same ``steering.vector_file`` and config hash."""
    h = hashlib.sha256(b"steer_eval.vectors/1")
    for item in sorted(items, key=lambda i: i.synset):
        h.update(f"\0{item.synset}\0{item.hint}\0".encode())
        layers = item.layers if item.layers is not None else {-1: item.vector}
        for layer, v in layers.items():
            assert v is not None
            h.update(f"{layer}:".encode() + v.astype("<f4").tobytes())
    return h.hexdigest()[:16]


def stage(items: Sequence[ConceptVectors], root: str | Path) -> Path:
    """Write ``items`` to ``<root>/vectors/<digest>/`` (once; a folder already there
    holds the same vectors) and return the folder: what ``steering.vector_file`` names."""
    import numpy as np

    from steering.vector_files import write_control_vector

    folder = Path(root) / "vectors" / _digest(items)
    if folder.is_dir():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        for item in items:
            if item.layers is not None:
                write_control_vector(partial / f"{item.synset}.gguf", item.layers, item.hint)
            else:
                assert item.vector is not None
                np.save(partial / f"{item.synset}.npy", item.vector)
        os.replace(partial, folder)  # atomic: a reader never sees half a folder
    except OSError:
        if not folder.is_dir():
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return folder


def names_in(path: Path) -> list[str] | None:
    """The concept names a vector file or folder holds, where they can be listed without
    reading the vectors (a ``.pt`` needs torch: None, the config's concepts are taken)."""
    from steering.vector_files import FOLDER_SUFFIXES, read_control_vector

    if path.is_dir():
        return sorted({p.stem for p in path.iterdir() if p.suffix in FOLDER_SUFFIXES})
    if path.suffix == ".gguf":
        return [str(read_control_vector(path).metadata.get("steer_eval.concept") or path.stem)]
    if path.suffix == ".npy":
        return [path.stem]
    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            return [str(k) for k in f.keys()]  # noqa: SIM118 (safe_open is not a dict)
    if path.suffix == ".npz":
        import numpy as np

        with np.load(path) as held:
            return list(held.files)
    return None


def concepts_of_file(path: Path, concepts: Concepts) -> list[str] | None:
    """The run's concepts for a vector file given without ``concepts=``: those its names
    resolve to, in the file's order (None: the file cannot list them)."""
    names = names_in(path)
    if names is None:
        return None
    found = [s for s in (concepts.resolve(n) for n in names) if s is not None]
    if not found:
        shown = ", ".join(repr(n) for n in names[:5]) + (", …" if len(names) > 5 else "")
        raise ArgumentError(
            f"vectors: {path} holds {shown}, none of them a concept of {concepts.file}; "
            "name each vector by its concept's synset id or name, or say which concept it "
            "steers with concepts=['herb.n.01']"
        )
    return list(dict.fromkeys(found))
