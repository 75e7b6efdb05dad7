# gpulab.inference: the two commands a new user runs are `make demo` and `make test`.
# Each installs what it needs (Debian packages, a Python venv with pinned tools) by itself.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.installed
COLLECTIONS := $(CURDIR)/.build/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/gpulab/inference
# Outside the checkout: ansible-test would otherwise list files through the enclosing git repo.
SANITY_ROOT := /tmp/gpulab-sanity/ansible_collections/gpulab/inference
LLAMA_CPP_PYTHON_VERSION := 0.3.36
LLAMA_CPP_COMMIT := 0c1e570
LLAMA_CPP_ARCHIVE := .cache/llama.cpp-$(LLAMA_CPP_COMMIT).tar.gz
MOLECULE_SCENARIOS ?= default drain roce vllm models supervisor
# prometheus: promtool, which checks and unit-tests the monitoring role's rules in `make test`.
APT_PACKAGES := podman runc debootstrap rsync shellcheck openssh-client prometheus

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(CURDIR)/$(VENV)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export CONTAINERS_CONF := $(CURDIR)/molecule/lab/containers.conf
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PYTHONUNBUFFERED := 1

step = @echo "==> $(1)"

.PHONY: help
# Target names may hold digits and hyphens (gpu-e2e); -h keeps file names out when several
# makefiles are read.
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9][a-zA-Z0-9_-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

# ---- installation -----------------------------------------------------------------------
.PHONY: deps host-deps venv collection
deps: host-deps venv collection ## Install everything the other targets need

host-deps: ## Debian packages for the container lab (podman, runc, debootstrap, the SSH client)
	$(call step,Debian packages: $(APT_PACKAGES))
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "    installing:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  if [ -d /run/systemd/system ]; then systemctl disable --now prometheus prometheus-node-exporter >/dev/null 2>&1 || true; fi; \
	else echo "    already installed"; fi

venv: $(VENV_STAMP) ## Python venv with the pinned tools of requirements.txt

$(VENV_STAMP): requirements.txt
	$(call step,Python venv $(VENV) from requirements.txt)
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@$(VENV)/bin/pip install -q --upgrade pip
	@$(VENV)/bin/pip install -q -r requirements.txt
	@touch $@

collection: ## Link the repository as the gpulab.inference collection under .build/
	@mkdir -p $(dir $(COLLECTION_LINK))
	@ln -sfn $(CURDIR) $(COLLECTION_LINK)

# ---- llama.cpp source for labs without internet ------------------------------------------
.PHONY: llama-cpp-archive
llama-cpp-archive: $(LLAMA_CPP_ARCHIVE) ## llama.cpp source archive (from the llama-cpp-python sdist on PyPI)

# flock, then a second look: make test's two lanes may both ask for it on a fresh machine.
$(LLAMA_CPP_ARCHIVE): | $(VENV_STAMP)
	$(call step,llama.cpp $(LLAMA_CPP_COMMIT) source archive from llama-cpp-python $(LLAMA_CPP_PYTHON_VERSION))
	@mkdir -p .build && flock .build/llama-cpp-archive.lock bash -c 'test -f $@ || bash scripts/llama-cpp-archive.sh $(LLAMA_CPP_PYTHON_VERSION) $@'

# ---- the container lab ---------------------------------------------------------------------
.PHONY: lab lab-destroy
lab: deps ## Create the container lab (node-a head, node-b and node-c workers)
	$(call step,container lab: image, fabric network, nodes)
	@ansible-playbook -i inventory/demo molecule/lab/create.yml

lab-destroy: deps ## Remove the lab containers and network (keeps the image and ccache)
	$(call step,removing the container lab)
	@ansible-playbook -i inventory/demo molecule/lab/destroy.yml

.PHONY: lab-images
# flock: make test's two lanes may both ask for them on a fresh machine; the second finds them built.
lab-images: deps ## Build the lab's node and mirror images once (debootstrap; reused while unchanged)
	@flock .build/lab-images.lock bash -c 'bash molecule/lab/build-image.sh && bash molecule/lab/build-mirror-image.sh'

# ---- the main job ---------------------------------------------------------------------------
.PHONY: demo facts
demo: lab llama-cpp-archive ## Deploy on the container lab and print what it serves
	$(call step,deploy.yml on the container lab: build on node-a, ship, RPC workers, head, smoke request)
	@ansible-playbook -i inventory/demo deploy.yml
	$(call step,the lab serves an OpenAI-compatible API on node-a: podman exec gpulab-node-a curl -s 127.0.0.1:8080/v1/models)
	@report=$$(ls -td reports/$${GPULAB_LAB_NAME:-gpulab}-[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T[0-9]*Z/ 2>/dev/null | head -n 1); \
	  test -n "$$report" || { echo "no report under reports/ (gpulab_bench_enabled false?)"; exit 1; }; \
	  echo "==> report: $${report}report.md"; \
	  sed -n '/^## Summary/,/^## GPU memory residency/{/^|/p}' "$${report}report.md"

facts: deps ## GPU facts table of an inventory: make facts INVENTORY=inventory/lab
	@ansible-playbook -i $(or $(INVENTORY),inventory/lab) playbooks/facts.yml

# ---- faults ---------------------------------------------------------------------------------
# The fault matrix (docs/faults.md) on a lab of its own, deployed first: each case under a steady load
# of one chat completion a second on the head; FAULTS_CASES picks some (scripts/faults.py's CASES).
FAULTS_LAB ?= gpulab-flt
FAULTS_FABRIC_PREFIX ?= 10.231.83
FAULTS_CASES ?=
# A small disk on every node for the model cases (model-corrupt, disk-full: scripts/faults.py MODEL_DIR).
FAULTS_LAB_TMPFS := {"lab_tmpfs": {"/srv/flt-disk": "rw,size=192m,mode=0755"}}
.PHONY: faults
faults: export GPULAB_LAB_NAME := $(FAULTS_LAB)
faults: export GPULAB_LAB_FABRIC_PREFIX := $(FAULTS_FABRIC_PREFIX)
faults: deps llama-cpp-archive lab-images ## Fault matrix on the container lab (FAULTS_LAB): figures for docs/faults.md
	$(call step,lab $(FAULTS_LAB): create and deploy)
	@ansible-playbook -i inventory/demo molecule/lab/create.yml -e '$(FAULTS_LAB_TMPFS)'
	@ansible-playbook -i inventory/demo deploy.yml
	$(call step,fault matrix: $(or $(FAULTS_CASES),every case))
	@python scripts/faults.py --lab $(FAULTS_LAB) $(if $(FAULTS_CASES),--cases $(FAULTS_CASES))

# ---- checks ---------------------------------------------------------------------------------
.PHONY: test lint sanity unit molecule build integration-llama
# Two lanes at once (scripts/lanes.sh), each on a lab of its own: most steps keep one core busy,
# so on two cores the lanes take less than one after the other. One cold llama.cpp compile per run:
# `default` builds first (about 11 minutes of both cores with an empty ccache) while the second lane
# runs what builds nothing (lint, sanity, `vllm`, the unit tests); then the second lane waits until
# that build is published (scripts/wait-for-lab-build.sh), and `supervisor`'s build and
# integration-llama find it (the labs' shared ccache, the controller's build cache). The second lane
# ends after the first, so integration-llama's timing checks run without a lab beside them.
# The lab images and the llama.cpp archive are made by the first lane's `make molecule` while the
# second lane lints: on a fresh machine that is minutes of debootstrap beside lint and sanity.
MOLECULE_LANE_1 ?= default roce drain
MOLECULE_LANE_2_FIRST ?= vllm
MOLECULE_LANE_2 ?= supervisor models
timed := bash scripts/timed.sh
# The second lane's lab (its own name and subnet), for each of its molecule steps.
lane_2_lab = MOLECULE_LAB=$(MOLECULE_LAB)-2 MOLECULE_FABRIC_PREFIX=$(MOLECULE_FABRIC_PREFIX_2)
test: deps ## Everything CI checks: lint, sanity, unit, molecule, integration-llama
	@bash scripts/lanes.sh \
	  "molecule-1=$(timed) 'molecule: $(MOLECULE_LANE_1)' $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS='$(MOLECULE_LANE_1)'" \
	  "checks=$(timed) 'ansible-lint (production profile)' $(MAKE) --no-print-directory lint \
	    && $(timed) 'ansible-test sanity' $(MAKE) --no-print-directory sanity \
	    && $(timed) 'molecule: $(MOLECULE_LANE_2_FIRST)' $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS='$(MOLECULE_LANE_2_FIRST)' $(lane_2_lab) \
	    && $(timed) 'unit tests' $(MAKE) --no-print-directory unit \
	    && $(timed) 'wait for the llama.cpp build of lane 1' bash scripts/wait-for-lab-build.sh $(MOLECULE_LAB) \
	    && $(timed) 'molecule: $(MOLECULE_LANE_2)' $(MAKE) --no-print-directory molecule MOLECULE_SCENARIOS='$(MOLECULE_LANE_2)' $(lane_2_lab) \
	    && $(timed) \"synthetic models loaded by the lab's llama.cpp build\" $(MAKE) --no-print-directory integration-llama"
	$(call step,all checks passed)

lint: deps ## ansible-lint, production profile
	$(call step,ansible-lint --offline (production profile))
	@ansible-lint --offline

# ansible-test installs its own pinned linters (pylint, yamllint, ...): they get a venv of their
# own so they cannot disturb the tools of .venv. --local, since --venv bootstraps pip from the
# internet.
SANITY_VENV := .build/sanity-venv
$(SANITY_VENV)/.installed: requirements.txt
	$(call step,venv for ansible-test sanity)
	@test -x $(SANITY_VENV)/bin/python || $(PYTHON) -m venv $(SANITY_VENV)
	@$(SANITY_VENV)/bin/pip install -q --upgrade pip
	@$(SANITY_VENV)/bin/pip install -q "$$(grep '^ansible-core==' requirements.txt)"
	@touch $@

sanity: deps $(SANITY_VENV)/.installed ## ansible-test sanity (own venv, offline pip bootstrap)
	$(call step,ansible-test sanity in $(SANITY_ROOT))
	@rm -rf $(SANITY_ROOT) && mkdir -p $(SANITY_ROOT)
	@git ls-files -z --cached --others --exclude-standard | rsync -a --from0 --files-from=- ./ $(SANITY_ROOT)/
	@pip_version=$$(grep -ohP "pip='\K[0-9.]+" $(SANITY_VENV)/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py); \
	  mkdir -p $(HOME)/.ansible/test/cache && \
	  cp scripts/ansible-test-get-pip.py $(HOME)/.ansible/test/cache/get_pip_$${pip_version//./_}.py
	@cd $(SANITY_ROOT) && PATH=$(CURDIR)/$(SANITY_VENV)/bin:$$PATH VIRTUAL_ENV=$(CURDIR)/$(SANITY_VENV) \
	  ansible-test sanity --local --requirements --python 3.11 --color no

# A skipped test fails the run (tests/no_skips.py, loaded by tests/conftest.py); so does an empty one.
# pytest-xdist: UNIT_WORKERS processes (0: one process), a test module's tests in one of them so
# its module fixtures run once; the ansible-runner tests wait on subprocesses, so 2 cores fill up.
UNIT_WORKERS ?= 2
unit: deps ## Unit tests and playbook tests (ansible-runner), in UNIT_WORKERS processes
	$(call step,pytest tests/unit tests/playbooks in $(UNIT_WORKERS) processes)
	@python -m pytest -q -rs -n $(UNIT_WORKERS) --dist loadscope --durations=15 tests/unit tests/playbooks

# The scenarios get a lab of their own (containers, networks, subnets), so a demo lab survives;
# make test's second lane takes another one.
MOLECULE_LAB ?= gpulab-test
MOLECULE_FABRIC_PREFIX ?= 10.231.78
MOLECULE_FABRIC_PREFIX_2 ?= 10.231.79
molecule: export GPULAB_LAB_NAME := $(MOLECULE_LAB)
molecule: export GPULAB_LAB_FABRIC_PREFIX := $(MOLECULE_FABRIC_PREFIX)
molecule: deps llama-cpp-archive lab-images ## Molecule scenarios one after the other on a lab of their own (MOLECULE_SCENARIOS)
	@for s in $(MOLECULE_SCENARIOS); do \
	  bash scripts/timed.sh "molecule test -s $$s" molecule test -s $$s || exit 1; \
	done

# The lab's builds are static and were made on Debian 12 like this host, so the newest one that
# the scenarios left in the labs' controller caches runs here: it loads the synthetic models directly.
LLAMA_BIN := .build/llama.cpp-bin
integration-llama: deps llama-cpp-archive ## Load synthetic GGUF models with the lab-built llama.cpp
	$(call step,pytest tests/integration_llama with the newest lab build)
	@newest=$$(ls -t .cache/llama.cpp-builds/*/*.tar.gz 2>/dev/null | head -n 1); \
	  test -n "$$newest" || { echo "no lab build in .cache/llama.cpp-builds: run 'make molecule' first"; exit 1; }; \
	  rm -rf $(LLAMA_BIN) && mkdir -p $(LLAMA_BIN) && tar -C $(LLAMA_BIN) --strip-components=1 -xzf "$$newest"; \
	  tar -C $(LLAMA_BIN) --strip-components=2 -xzf $(LLAMA_CPP_ARCHIVE) llama.cpp/models/ggml-vocab-qwen2.gguf; \
	  echo "    build $$(basename $$newest .tar.gz)"
	@GPULAB_LLAMA_BIN_DIR=$(CURDIR)/$(LLAMA_BIN)/bin GPULAB_LLAMA_VOCAB_GGUF=$(CURDIR)/$(LLAMA_BIN)/ggml-vocab-qwen2.gguf \
	  python -m pytest -q -rs tests/integration_llama

# On a GPU host, as root, with or without systemd: the whole deploy.yml against the host itself,
# then the benchmark, residency, memory plan and llama-bench per layout (scripts/gpu-e2e.sh).
GPU_E2E_OUT ?= gpu-e2e-out
.PHONY: gpu-e2e
gpu-e2e: ## On a GPU host: deploy, benchmark and measure end to end (results in GPU_E2E_OUT)
	$(call step,GPU end-to-end run into $(GPU_E2E_OUT))
	@bash scripts/gpu-e2e.sh $(GPU_E2E_OUT)

build: deps ## ansible-galaxy collection build into .build/
	$(call step,ansible-galaxy collection build)
	@ansible-galaxy collection build --force --output-path .build/dist .
