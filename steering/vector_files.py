"""Steering vectors in the field's file formats: read anyone's, write ours.

Read (:func:`read_vectors`): one vector per concept as

- a mapping file: ``.safetensors`` (tensor name = concept), ``.pt`` (a dict of tensors,
  loaded with ``weights_only=True``, so no code runs) or ``.npz``;
- a folder of files named by concept: ``<concept>.npy``, ``.pt`` (one tensor),
  ``.safetensors`` (one tensor) or ``.gguf`` (a control vector);
- a llama.cpp / repeng GGUF control vector (one ``direction.<layer>`` tensor per layer),
  alone when it names its concept (``steer_eval.concept``) or the run has one concept.

Everything is validated at load (:func:`read_vectors`, the one validator of a real run
and of ``run --dry-run``, which knows the model from its config alone): the length
against the model's hidden size, finite and non-zero values, every concept of the run
found (by synset id or by name), and for a GGUF the run's layer present. Errors name the
file, the concept and the fix. Two things are said, not refused (a logged warning): a
GGUF of several layers gives only the run's layer (which one, and how many were left),
and a ``controlvector.model_hint`` naming another family of model than the one loaded
(as repeng warns). The hint is compared by family (:func:`model_family`): EasySteer's
``qwen2.5`` is transformers' ``qwen2``, ``llama3`` is ``llama``, ``gemma3`` and the
architecture class ``Gemma3ForCausalLM`` are ``gemma3_text``; ``gemma2`` or ``mistral``
on a Gemma 3 still warn.

Deployed as a repeng or EasySteer file is (:func:`read_layered_vectors`,
``steering.layers``): every layer a GGUF holds (``file``) or those of an inclusive range
(``[i, j]``, llama.cpp's ``--control-vector-layer-range``), each vector as the file has
it (its own norm), checked like the run's layer and against the model's layer count.

Write (:func:`write_control_vector`, :func:`write_mapping`): a GGUF control vector that
llama.cpp's ``--control-vector`` loads, and a safetensors mapping.

The GGUF control-vector layout, checked against the sources rather than guessed:

- repeng's ``ControlVector.export_gguf`` (vgel/repeng, ``repeng/extract.py``) writes
  ``gguf.GGUFWriter(path, "controlvector")`` (so ``general.architecture`` is
  ``controlvector``), the string ``controlvector.model_hint`` (the HF ``model_type``),
  the uint32 ``controlvector.layer_count`` (the number of direction tensors it writes)
  and one float32 tensor ``direction.<layer>`` per layer; its keys are repeng's layer ids,
  indices into the decoder layer list whose *output* it steers (it reads them from
  ``hidden_states[layer + 1]``).
- llama.cpp's ``llama_control_vector_load_one`` (``common/common.cpp``) accepts only 1-D
  F32 tensors of one length, rejects ``direction.0``, and copies ``direction.N`` to offset
  ``n_embd·(N−1)`` of its buffer; ``llama_adapter_cvec::apply`` copies offset
  ``n_embd·(il−1)`` into ``tensors[il]``, and every model graph adds ``tensors[il]`` to the
  output of its 0-based block ``il`` (``cur = build_cvec(cur, il)`` just before
  ``"l_out"``). So ``direction.N`` steers the output of 0-based decoder block N: the same
  number as this suite's ``layer`` (a forward hook on ``layers[N]``) and repeng's key.
  The index counts from 1 only in that block 0's output cannot be steered; keys other
  than ``direction.*`` are ignored by both readers, which is where this module's
  ``steer_eval.*`` metadata lives.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import numpy as np

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from gguf import GGUFReader

ARCH = "controlvector"
MAPPING_SUFFIXES = (".safetensors", ".pt", ".npz")
FOLDER_SUFFIXES = (".npy", ".pt", ".safetensors", ".gguf")
# The run's exact float32 unit direction, kept in the GGUF's metadata (llama.cpp and
# repeng read tensors only): a re-import then steers with the very vector the run used,
# where normalising the scaled tensor again could move the last bit.
UNIT_KEY = "steer_eval.unit_direction"


# steering.layers: the run's layer alone, every layer a GGUF holds, or an inclusive range
LayerSpec: TypeAlias = Literal["auto", "file"] | tuple[int, int]


class VectorFileError(ValueError):
    """A vector file cannot be used; the message names the file, the concept and the fix."""


# A model's family from a hint or a name: letters, major version, the rest, once what
# names a class or a text decoder (``ForCausalLM``, ``_text``) is dropped.
_FAMILY = re.compile(r"([a-z]+)(\d*)((?:\.\d+)*)(.*)")
_CLASS_SUFFIXES = ("forcausallm", "forconditionalgeneration", "model")
# model types transformers keeps for every version of a family (Llama 2, 3, 3.1 are
# all ``llama``): a hint naming any version of them is the same family
UNVERSIONED = frozenset({"llama"})


def model_family(name: str) -> tuple[str, str, str]:
    """(name, major version, variant) of a model hint, type or class, lower-cased:
    ``qwen2.5`` and ``Qwen2ForCausalLM`` are ``("qwen", "2", "")``, ``gemma3_text``
    ``("gemma", "3", "")``, ``qwen2_moe`` ``("qwen", "2", "moe")``. A minor version is
    dropped: transformers names a family by its major version."""
    text = re.sub(r"[^a-z0-9.]", "", name.lower())
    for suffix in _CLASS_SUFFIXES:
        text = text.removesuffix(suffix)
    found = _FAMILY.fullmatch(text)
    if found is None:
        return (text, "", "")
    return (found.group(1), found.group(2), found.group(4).removesuffix("text"))


def same_family(hint: str, model: str) -> bool:
    """Whether a file's hint names the family of ``model`` (a type or class name)."""
    h, m = model_family(hint), model_family(model)
    return (h[0], h[2]) == (m[0], m[2]) and (h[1] == m[1] or (not m[1] and m[0] in UNVERSIONED))


# EasySteer's StatisticalControlVector.model_type when none was set (its export_gguf
# writes it as the file's model_hint): it names no model, so nothing is checked against it
NO_MODEL_HINT = "unknown"


@dataclass(frozen=True)
class ControlVector:
    """A GGUF control vector: directions by layer (llama.cpp's index) and its metadata."""

    directions: dict[int, np.ndarray]
    model_hint: str = ""
    metadata: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelKind:
    """What a control vector's ``controlvector.model_hint`` is checked against: the
    model's ``config.model_type`` (what repeng and our exports write) and other names a
    hint may rightly carry (the text config's type, the architecture class that exports
    wrote before). An empty ``model_type`` checks nothing."""

    model_type: str = ""
    also: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: Any, *names: str) -> ModelKind:
        """From a Hugging Face config (and other accepted names: the model's class)."""
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        accepted = [
            getattr(text, "model_type", None),
            *(getattr(config, "architectures", None) or []),
            *names,
        ]
        return cls(str(getattr(config, "model_type", "") or ""), tuple(n for n in accepted if n))

    def matches(self, hint: str) -> bool:
        """Whether ``hint`` names this model's family (:func:`same_family`). No hint, or
        :data:`NO_MODEL_HINT`, names no model and so matches any."""
        if hint in ("", NO_MODEL_HINT) or not self.model_type:
            return True
        return any(same_family(hint, name) for name in (self.model_type, *self.also))


@dataclass
class _Reading:
    """What one :func:`read_vectors` checks against, and what it has to say."""

    layer: int
    kind: ModelKind
    layers: LayerSpec = "auto"
    n_layers: int | None = None  # the model's decoder layers, when known
    layers_left: dict[int, list[Path]] = field(default_factory=dict)  # layers in file -> files
    foreign: dict[str, list[Path]] = field(default_factory=dict)  # mismatched hint -> files
    # layers: file or a range: each GGUF's vectors at the layers taken, as the file has them
    taken: dict[Path, dict[int, np.ndarray]] = field(default_factory=dict)
    steered: dict[tuple[tuple[int, ...], int], list[Path]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """One line per kind of thing said (a folder of 100 files says it once)."""
        lines = []
        for n, files in sorted(self.layers_left.items()):
            lines.append(
                f"{_files(files)}: took direction.{self.layer} (this run's layer) of the {n} "
                f"layers {'it holds' if len(files) == 1 else 'each holds'}; the other {n - 1} "
                "were ignored (steering.layers: file steers them all)"
            )
        for (taken, n), files in sorted(self.steered.items()):
            which = "file"
            if isinstance(self.layers, tuple):
                which = f"[{self.layers[0]}, {self.layers[1]}], both ends included"
            lines.append(
                f"{_files(files)}: steering {len(taken)} of the {n} layers "
                f"{'it holds' if len(files) == 1 else 'each holds'}, {list(taken)} "
                f"(steering.layers: {which})"
            )
        for hint, files in sorted(self.foreign.items()):
            lines.append(
                f"{_files(files)}: controlvector.model_hint is {hint!r}, but the model is "
                f"{self.kind.model_type!r}; a vector made on another model may not steer "
                "this one (used anyway)"
            )
        return lines


def _files(files: list[Path]) -> str:
    if len(files) == 1:
        return str(files[0])
    shown = ", ".join(f.name for f in files[:3]) + (", …" if len(files) > 3 else "")
    return f"{len(files)} GGUF files in {files[0].parent} ({shown})"


@dataclass(frozen=True)
class ConceptNames:
    """The run's concepts: synset ids, with readable names accepted as aliases."""

    synsets: tuple[str, ...]
    names: tuple[str, ...]

    def resolve(self, key: str) -> str | None:
        if key in self.synsets:
            return key
        matches = [s for s, n in zip(self.synsets, self.names, strict=True) if n == key]
        return matches[0] if len(matches) == 1 else None


def _field_value(reader: GGUFReader, key: str) -> object | None:
    found = reader.get_field(key)
    return None if found is None else found.contents()


def _open_gguf(path: Path) -> GGUFReader:
    from gguf import GGUFReader

    try:
        return GGUFReader(path)
    except Exception as exc:  # the gguf package raises several kinds on a bad file
        raise VectorFileError(f"{path}: not a readable GGUF file ({exc})") from exc


def read_control_vector(path: str | Path) -> ControlVector:
    """A GGUF control vector (llama.cpp / repeng layout), checked like llama.cpp checks it."""
    path = Path(path)
    reader = _open_gguf(path)
    arch = _field_value(reader, "general.architecture")
    if arch not in (None, ARCH):
        raise VectorFileError(
            f"{path}: general.architecture is {arch!r}, not {ARCH!r}: this is a model, not a "
            "control vector (repeng's ControlVector.export_gguf or `steer-eval export` write one)"
        )
    directions: dict[int, np.ndarray] = {}
    for tensor in reader.tensors:
        if not tensor.name.startswith("direction."):
            continue
        suffix = tensor.name.split(".", 1)[1]
        if not suffix.isdigit() or int(suffix) == 0:
            raise VectorFileError(
                f"{path}: tensor {tensor.name!r} is not direction.<N> with N ≥ 1 "
                "(llama.cpp rejects it too); rename it to the layer it steers"
            )
        data = np.asarray(tensor.data)
        if data.dtype != np.float32 or data.ndim != 1:
            raise VectorFileError(
                f"{path}: tensor {tensor.name} is {data.dtype} with shape {data.shape}; a control "
                "vector holds 1-D float32 tensors (llama.cpp refuses anything else)"
            )
        directions[int(suffix)] = data.astype(np.float32).copy()
    if not directions:
        raise VectorFileError(f"{path}: no direction.<layer> tensors; is it a control vector?")
    metadata = {
        name: _field_value(reader, name) for name in reader.fields if name.startswith("steer_eval.")
    }
    hint = _field_value(reader, f"{ARCH}.model_hint")
    return ControlVector(directions, str(hint or ""), metadata)


def check_for_llama_cpp(path: str | Path, n_layer: int, n_embd: int) -> ControlVector:
    """``path`` read as llama.cpp will use it on a model of ``n_layer`` blocks and width
    ``n_embd``, or a :class:`VectorFileError` for what llama.cpp would refuse or drop,
    before any model is loaded.

    ``llama_control_vector_load_one`` refuses any tensor not named ``direction.<N>``
    (the only tensors it reads) and ``direction.0``; ``llama_adapter_cvec::apply`` refuses
    a width other than the model's ``n_embd``, and holds a row only for blocks 1 to
    ``n_layer − 1``, so a ``direction.N`` with N ≥ ``n_layer`` would silently steer nothing.
    """
    path = Path(path)
    other = [t.name for t in _open_gguf(path).tensors if not t.name.startswith("direction.")]
    if other:
        raise VectorFileError(
            f"{path}: tensors {other[:3]} are not direction.<N>; llama.cpp refuses a control "
            "vector holding anything else (keep facts as metadata keys, not tensors)"
        )
    cv = read_control_vector(path)  # direction.0, dtype and shape refused as llama.cpp does
    beyond = sorted(n for n in cv.directions if n >= n_layer)
    if beyond:
        raise VectorFileError(
            f"{path}: direction.{beyond[0]} is beyond the model's {n_layer} blocks (llama.cpp "
            f"steers direction.1 to direction.{n_layer - 1}); export it from this model"
        )
    widths = sorted({v.shape[0] for v in cv.directions.values()})
    if widths != [n_embd]:
        raise VectorFileError(
            f"{path}: its directions are {', '.join(map(str, widths))} wide, but the model's "
            f"n_embd is {n_embd}; llama.cpp refuses it: export it from the same model"
        )
    return cv


def write_control_vector(
    path: str | Path,
    directions: Mapping[int, np.ndarray],
    model_hint: str,
    metadata: Mapping[str, str | float | int | Sequence[float] | np.ndarray] | None = None,
) -> Path:
    """Write ``directions`` (layer → vector) as repeng's ``export_gguf`` does, plus our
    ``steer_eval.*`` metadata (strings, numbers, float arrays)."""
    from gguf import GGUFWriter

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for layer in directions:
        if int(layer) < 1:
            raise VectorFileError(
                f"{path}: llama.cpp cannot steer the output of block {layer} (it rejects "
                "direction.0); steer at layer ≥ 1 or use the safetensors export"
            )
    writer = GGUFWriter(str(path), ARCH)
    writer.add_string(f"{ARCH}.model_hint", model_hint)
    writer.add_uint32(f"{ARCH}.layer_count", len(directions))
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, bool | int):
            writer.add_int64(key, int(value))
        elif isinstance(value, float):
            writer.add_float64(key, value)
        else:
            writer.add_array(key, [float(x) for x in np.asarray(value, dtype=np.float32)])
    for layer, vector in sorted(directions.items()):
        writer.add_tensor(f"direction.{int(layer)}", np.asarray(vector, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_mapping(
    path: str | Path, vectors: Mapping[str, np.ndarray], metadata: Mapping[str, str]
) -> Path:
    """A safetensors file of ``concept → float32 vector`` with string metadata."""
    from safetensors.numpy import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in vectors.items()}
    save_file(tensors, str(path), metadata=dict(metadata))
    return path


def _from_gguf(path: Path, reading: _Reading, cv: ControlVector | None = None) -> np.ndarray:
    cv = cv or read_control_vector(path)
    layer = reading.layer
    if not reading.kind.matches(cv.model_hint):
        reading.foreign.setdefault(cv.model_hint, []).append(path)
    if reading.layers != "auto":
        _take_layers(path, cv, reading)
    elif layer in cv.directions:
        reading.taken[path] = {layer: cv.directions[layer]}
        if len(cv.directions) > 1:
            reading.layers_left.setdefault(len(cv.directions), []).append(path)
    unit = cv.metadata.get(UNIT_KEY)
    if cv.metadata.get("steer_eval.layer") == layer and unit is not None:
        return np.asarray(unit, dtype=np.float32)
    if layer not in cv.directions:
        raise VectorFileError(
            f"{path}: no direction.{layer} for this run's layer {layer} (the file has layers "
            f"{sorted(cv.directions)}); run at one of them with `--set layer=<N>`, as llama.cpp "
            "numbers them (the output of 0-based decoder block N)"
        )
    return cv.directions[layer]


def _take_layers(path: Path, cv: ControlVector, reading: _Reading) -> None:
    """The layers ``reading.layers`` selects from a file (every one, or those of an
    inclusive range), each checked; the run's layer must be one of them (its α, probes
    and detection metrics are read there)."""
    held = sorted(cv.directions)
    taken, where = held, "steering.layers: file"
    if isinstance(reading.layers, tuple):
        low, high = reading.layers
        taken = [n for n in held if low <= n <= high]
        where = f"steering.layers [{low}, {high}] (inclusive, as llama.cpp's range)"
    if reading.layer not in taken:
        raise VectorFileError(
            f"{path}: this run's layer {reading.layer} is not among the layers {where} "
            f"steers ({taken or 'none'}; the file holds {held}); set `layer` to one of them, "
            "where its α, probes and detection metrics are read"
        )
    if reading.n_layers is not None and taken[-1] >= reading.n_layers:
        raise VectorFileError(
            f"{path}: direction.{taken[-1]} is beyond the model's {reading.n_layers} decoder "
            f"layers (0-{reading.n_layers - 1}); the file was made on a deeper model"
        )
    for n in taken:
        v = cv.directions[n]
        if not np.isfinite(v).all():
            raise VectorFileError(f"{path}: direction.{n} has NaN or infinite values")
    reading.taken[path] = {n: cv.directions[n] for n in taken}
    if len(held) > 1:
        reading.steered.setdefault((tuple(taken), len(held)), []).append(path)


def _one_tensor(path: Path) -> np.ndarray:
    """The single vector of a per-concept file."""
    if path.suffix == ".npy":
        try:
            vector: np.ndarray = np.load(path, allow_pickle=False)
            return vector
        except ValueError as exc:
            raise VectorFileError(
                f"{path}: not a plain .npy array ({exc}); save it with numpy.save(path, vector)"
            ) from exc
    mapping = _mapping(path)
    if len(mapping) != 1:
        raise VectorFileError(
            f"{path}: holds {len(mapping)} tensors ({sorted(mapping)[:5]}); a file named by "
            "its concept must hold one vector"
        )
    return next(iter(mapping.values()))


def _mapping(path: Path) -> dict[str, np.ndarray]:
    """Every named vector of a mapping file (no code is executed to read it)."""
    if path.suffix == ".safetensors":
        from safetensors.numpy import load_file

        try:
            return dict(load_file(str(path)))
        except Exception as exc:  # the Rust reader raises its own error type
            raise VectorFileError(f"{path}: not a readable safetensors file ({exc})") from exc
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    if path.suffix == ".pt":
        import torch

        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            raise VectorFileError(
                f"{path}: not a tensor file torch can load safely ({exc}); save plain tensors "
                "with torch.save({concept: tensor}, path)"
            ) from exc
        if isinstance(loaded, torch.Tensor):
            return {path.stem: loaded.detach().float().numpy()}
        if not isinstance(loaded, dict) or not all(
            isinstance(v, torch.Tensor) for v in loaded.values()
        ):
            raise VectorFileError(
                f"{path}: holds {type(loaded).__name__}, not a dict of concept → tensor"
            )
        return {str(k): v.detach().float().numpy() for k, v in loaded.items()}
    raise VectorFileError(
        f"{path}: unknown vector file type {path.suffix!r}; use {', '.join(MAPPING_SUFFIXES)}, "
        f"a .gguf control vector or a folder of {', '.join(FOLDER_SUFFIXES)} files"
    )


def _raw_vectors(
    path: Path, names: ConceptNames, reading: _Reading
) -> dict[str, tuple[np.ndarray | None, Path]]:
    """Name in the file → (vector, the file it came from); None for a folder's file that
    names no concept of the run (left unread)."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in FOLDER_SUFFIXES)
        if not files:
            raise VectorFileError(
                f"{path}: no {', '.join(FOLDER_SUFFIXES)} files; name one file per concept, "
                "e.g. dog.n.01.npy"
            )
        out: dict[str, tuple[np.ndarray | None, Path]] = {}
        for f in files:
            if names.resolve(f.stem) is None:
                # Not named by a concept of this run (another concept, or a mapping file
                # such as an export's directions.safetensors): listed, never read.
                out.setdefault(f.stem, (None, f))
                continue
            if f.stem in out:
                raise VectorFileError(f"{path}: two files for {f.stem!r}; keep one")
            out[f.stem] = (_from_gguf(f, reading) if f.suffix == ".gguf" else _one_tensor(f), f)
        return out
    if not path.exists():
        raise VectorFileError(f"{path}: no such file or folder (steering.vector_file)")
    if path.suffix == ".gguf":
        cv = read_control_vector(path)
        concept = cv.metadata.get("steer_eval.concept")
        if concept is None and len(names.synsets) != 1:
            raise VectorFileError(
                f"{path}: one control vector but {len(names.synsets)} concepts, and the file "
                "names none (steer_eval.concept); put one <concept>.gguf per concept in a folder"
            )
        return {str(concept or names.synsets[0]): (_from_gguf(path, reading, cv), path)}
    if path.suffix == ".npy":
        if len(names.synsets) != 1:
            raise VectorFileError(
                f"{path}: one .npy vector but {len(names.synsets)} concepts; put one "
                "<concept>.npy per concept in a folder"
            )
        return {names.synsets[0]: (_one_tensor(path), path)}
    return {k: (v, path) for k, v in _mapping(path).items()}


def _read(
    path: Path, concepts: ConceptNames, hidden_size: int, reading: _Reading
) -> tuple[dict[str, np.ndarray], dict[str, Path]]:
    """Every concept's validated vector at the run's layer, and the file it came from."""
    raw = _raw_vectors(path, concepts, reading)
    found: dict[str, tuple[np.ndarray | None, Path, str]] = {}
    for key, (vector, source) in raw.items():
        synset = concepts.resolve(key)
        if synset is None:
            continue
        if synset in found:
            raise VectorFileError(
                f"{source}: {key!r} and {found[synset][2]!r} are both {synset}; keep one"
            )
        found[synset] = (vector, source, key)
    missing = [s for s in concepts.synsets if s not in found]
    if missing:
        unused = sorted(k for k in raw if concepts.resolve(k) is None)
        hints = []
        for s in missing[:5]:
            close = difflib.get_close_matches(s, unused, n=1)
            hints.append(f"{s} (closest in the file: {close[0]!r})" if close else s)
        raise VectorFileError(
            f"{path}: no vector for {', '.join(hints)}; name each vector by its concept's "
            f"synset id or name in the concept file (the file has {sorted(raw)[:8]})"
        )
    out = {}
    for synset, (vector, source, key) in found.items():
        v = np.asarray(vector)
        if v.ndim == 2 and 1 in v.shape:
            v = v.reshape(-1)
        where = f"{source}: the vector for {synset}" + (f" ({key!r})" if key != synset else "")
        if v.ndim != 1 or v.shape[0] != hidden_size:
            raise VectorFileError(
                f"{where} has shape {tuple(v.shape)}, but the model's hidden size is "
                f"{hidden_size}; export it from the same model (and a residual-stream layer)"
            )
        v = v.astype(np.float32)
        if not np.isfinite(v).all():
            raise VectorFileError(f"{where} has NaN or infinite values; re-export it")
        if not np.any(v):
            raise VectorFileError(f"{where} is all zeros, which has no direction; re-export it")
        out[synset] = v
    return out, {synset: source for synset, (_, source, _) in found.items()}


def _say(reading: _Reading, notes: list[str] | None) -> None:
    for line in reading.notes():
        log.warning("%s", line)
        if notes is not None:
            notes.append(line)


def read_vectors(
    path: str | Path,
    synsets: Sequence[str],
    names: Sequence[str],
    hidden_size: int,
    layer: int,
    kind: ModelKind | None = None,
    notes: list[str] | None = None,
) -> dict[str, np.ndarray]:
    """One validated float32 vector per concept (keyed by synset id), from ``path``.

    Vectors keep their length (a caller normalises); a vector of another length, with a
    non-finite value or all zeros, a concept with no vector, two vectors for one concept,
    or a GGUF without ``layer`` is an error naming the file, the concept and the fix.
    Vectors for concepts outside the run are ignored (a run of ``concepts.limit`` reads a
    fuller export). What is worth saying but not refusing (the layer taken from a file
    of several, a ``model_hint`` of another family than ``kind``'s) is logged as a
    warning and appended to ``notes``.
    """
    reading = _Reading(layer, kind or ModelKind())
    out, _ = _read(Path(path), ConceptNames(tuple(synsets), tuple(names)), hidden_size, reading)
    _say(reading, notes)
    return out


@dataclass(frozen=True)
class LayeredVectors:
    """A file's vectors as deployed: per concept its vector at the run's layer as
    :func:`read_vectors` gives it (``anchor``: an export's exact unit direction where it
    keeps one) and its vectors at every steered layer as the file holds them
    (``layers``: a GGUF's tensors, with their own norms)."""

    anchor: dict[str, np.ndarray]
    layers: dict[str, dict[int, np.ndarray]]


def read_layered_vectors(
    path: str | Path,
    synsets: Sequence[str],
    names: Sequence[str],
    hidden_size: int,
    layer: int,
    layers: LayerSpec,
    kind: ModelKind | None = None,
    notes: list[str] | None = None,
    n_layers: int | None = None,
) -> LayeredVectors:
    """:func:`read_vectors`, and each concept's vectors at the layers ``layers`` selects:
    ``auto`` the run's layer alone, ``file`` every layer its GGUF holds, ``(i, j)`` those
    with i ≤ N ≤ j (both ends included, as llama.cpp's ``--control-vector-layer-range``).
    Several layers come from GGUF control vectors only (a mapping or ``.npy`` holds one
    vector per concept); the run's layer must be among those taken; each is checked for
    the hidden size, finite values and, with ``n_layers``, a layer the model has."""
    reading = _Reading(layer, kind or ModelKind(), layers, n_layers)
    concepts = ConceptNames(tuple(synsets), tuple(names))
    anchor, sources = _read(Path(path), concepts, hidden_size, reading)
    out: dict[str, dict[int, np.ndarray]] = {}
    for synset, source in sources.items():
        taken = reading.taken.get(source)
        if taken is None and layers != "auto":
            raise VectorFileError(
                f"{source}: steering.layers {layers!r} steers the layers of a GGUF control "
                f"vector, but this {source.suffix or 'folder'} file holds one vector per "
                "concept, for no layer; use steering.layers: auto (the run's layer)"
            )
        if taken is None:  # a mapping or .npy: the file's vector at the run's layer
            taken = {layer: anchor[synset]}
        for n, v in taken.items():
            if v.shape != (hidden_size,):
                raise VectorFileError(
                    f"{source}: direction.{n} of {synset} has shape {v.shape}, but the "
                    f"model's hidden size is {hidden_size}; export it from the same model"
                )
        out[synset] = {n: np.asarray(v, dtype=np.float32) for n, v in sorted(taken.items())}
    _say(reading, notes)
    return LayeredVectors(anchor, out)
