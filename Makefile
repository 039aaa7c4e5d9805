# drivekit: the two set-up commands on a fresh machine are `make demo` and `make test`.
# Every variable below can be overridden: make demo DEMO=/tmp/demo DEMO_ROUTES=8 WORKERS=4

PYTHON ?= python3
VENV ?= .venv
PIP_FLAGS ?=
DEMO ?= demo
DEMO_ROUTES ?= 8
WORKERS ?= 2
PYTEST_ARGS ?=
APPTAINER ?= apptainer
APPTAINER_FLAGS ?=
IMAGES ?= containers/carla.sif containers/train.sif

PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
# Every file in bin/, bin/lib/ and .ci/ (tests/test_bin.py lists the same); exceptions in .shellcheckrc.
SHELL_SCRIPTS = $(filter-out bin/lib,$(wildcard bin/* bin/lib/* .ci/*))
IMAGE_SOURCES = pyproject.toml $(wildcard README.md) $(shell find tools -name '*.py' -not -path '*/__pycache__/*')

.PHONY: install test lint bench demo images clean distclean
.DELETE_ON_ERROR:

install: $(STAMP)

# The virtualenv is rebuilt when pyproject.toml changes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -e '.[dev]'
	touch $@

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/shellcheck -o all $(SHELL_SCRIPTS)

bench: $(STAMP)
	@set -e; for bench in $(wildcard benchmarks/bench_*.py); do \
	  echo "== $$bench"; $(PY) "$$bench"; \
	done

# The whole pipeline on the embedded world (bin/demo): town, routes, collection, buckets, cache,
# pretrain, posttrain, then a summary. Rerunning skips finished route runs and resumes training.
demo: $(STAMP)
	DEMO_ROUTES=$(DEMO_ROUTES) WORKERS=$(WORKERS) bin/demo $(DEMO)

images: $(IMAGES)

# An image holds our package, so it is rebuilt when the code changes.
containers/%.sif: containers/%.def $(IMAGE_SOURCES)
	@command -v $(APPTAINER) >/dev/null 2>&1 || { \
	  echo "make images: '$(APPTAINER)' not found: install Apptainer (https://apptainer.org/docs/admin/main/installation.html)," \
	       "or skip the images: the bin/ wrappers run on the host's .venv without them" >&2; exit 1; }
	$(APPTAINER) build $(APPTAINER_FLAGS) --force $@ $<

clean:
	rm -rf $(DEMO) .pytest_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(IMAGES)
