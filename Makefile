# cardstream — the two set-up commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PY    ?= python3.11
VENV  := .venv
STAMP := $(VENV)/.installed
EXTRA ?= cpu

.PHONY: setup models browser tools stack-up stack-down demo test test-unit test-integration bench faults lint clean

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null || { echo "make: $(PY) is missing: install Python 3.11" >&2; exit 1; }
	@test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[$(EXTRA),dev]" || { echo "make: pip install failed (package registry reachable?)" >&2; exit 1; }
	@echo "make: compiling pymatting's numba kernels once (about a minute on 2 cores; cached in $(VENV))"
	$(VENV)/bin/python -c "import rembg.bg"
	@touch $(STAMP)

setup: $(STAMP) ## .venv with the project (cpu extra) and dev tools; fast when nothing changed

models: setup ## model files into ~/.u2net and the OCR-B font into ~/.cache/cardstream, verified by SHA-256
	scripts/models
	scripts/fonts

browser: ## Debian's chromium for the page's test (apt-get when missing)
	scripts/browser >/dev/null

tools: ## helm and promtool, built once from the Go module proxy (cached under ~/.cache): the unit tier runs them
	scripts/helm >/dev/null
	scripts/promtool >/dev/null

stack-up: setup ## Kafka (KRaft) + MinIO on 127.0.0.1, topics and buckets
	scripts/stack up

stack-down:
	scripts/stack down

demo: models stack-up ## the main job on the sample uploads
	eval "$$(scripts/stack env)" && $(VENV)/bin/cardstream demo

test: models browser tools stack-up ## the whole suite (unit + integration) against the real stack
	eval "$$(scripts/stack env)" && $(VENV)/bin/python -m pytest tests

test-unit: models tools
	$(VENV)/bin/python -m pytest tests/unit

test-integration: models browser stack-up
	eval "$$(scripts/stack env)" && $(VENV)/bin/python -m pytest tests/integration

bench: models stack-up ## benchmarks (never part of `make test`)
	$(VENV)/bin/python -m pip install -q -e ".[$(EXTRA),dev,bench]"
	eval "$$(scripts/stack env)" && $(VENV)/bin/python -m benchmarks.run

# its own Kafka + MinIO (scripts/stack instance "faults" on 29092/29094/29093/29000/29001), never the
# stack on 9092/9000; FAULTS_ARGS passes options, e.g. FAULTS_ARGS='--faults poison,scale'
faults: setup ## issue 31's fault table -> out/faults/summary.json (never part of `make test`); SOAK=1: the 30 min soak
	$(VENV)/bin/python -m benchmarks.faults $(if $(SOAK),--soak) $(FAULTS_ARGS)

lint: setup ## ruff (style, imports, lines <= 100) over the code and its tests; mypy over the packages
	$(VENV)/bin/ruff check streams processors schemas tests benchmarks
	$(VENV)/bin/mypy

clean: stack-down
	rm -rf $(VENV) out .stack
