# drivekit: the two set-up commands on a fresh machine are `make demo` and `make test`.
# Every variable below can be overridden: make demo DEMO=/tmp/demo DEMO_ROUTES=8 WORKERS=4

PYTHON ?= python3
VENV ?= .venv
PIP_FLAGS ?=
DEMO ?= demo
DEMO_ROUTES ?= 4
WORKERS ?= 2
PYTEST_ARGS ?=
APPTAINER ?= apptainer
APPTAINER_FLAGS ?=
IMAGES ?= containers/carla.sif

PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp
SHELL_SCRIPTS = $(filter-out bin/lib,$(wildcard bin/* bin/lib/*)) .ci/run
IMAGE_SOURCES = pyproject.toml $(wildcard README.md) $(shell find tools -name '*.py' -not -path '*/__pycache__/*')
DEMO_TOWN := $(DEMO)/routes/towns/town.xodr
DEMO_ROUTES_DONE := $(DEMO)/routes/.done

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
	$(VENV)/bin/shellcheck $(SHELL_SCRIPTS)

bench: $(STAMP)
	@set -e; for bench in $(wildcard benchmarks/bench_*.py); do \
	  echo "== $$bench"; $(PY) "$$bench"; \
	done

# The pipeline on the embedded world: a town, routes, their collection, the progress table and a
# picture of one recorded frame. Rerunning keeps the town and routes and skips finished route runs.
demo: $(DEMO_ROUTES_DONE)
	bin/collect $(DEMO)/routes --root $(DEMO)/data --workers $(WORKERS)
	bin/progress $(DEMO)/data
	@set -e; run=$$($(PY) -c "$$FIRST_FINISHED" $(DEMO)/data); \
	if [ -z "$$run" ]; then echo "make demo: no route run finished; see bin/progress $(DEMO)/data" >&2; exit 1; fi; \
	echo "$(PY) -m tools.collect show $$run --out $(DEMO)/frame.png"; \
	$(PY) -m tools.collect show $$run --out $(DEMO)/frame.png

$(DEMO_TOWN): | $(STAMP)
	$(PY) -m tools.collect town --out $@

$(DEMO_ROUTES_DONE): $(DEMO_TOWN)
	$(PY) -m tools.collect routes --town $(DEMO_TOWN) --count $(DEMO_ROUTES) --out $(DEMO)/routes
	touch $@

# Prints "RUN_FOLDER --frame I": the first finished route run of a root and its middle frame.
define FIRST_FINISHED
import sys
from pathlib import Path
from tools.dataset.layout import Layout
from tools.dataset.results import RunState, run_state
layout = Layout(Path(sys.argv[1]).absolute())
for key in layout.iter_runs():
    if run_state(layout, key) is RunState.FINISHED:
        print(layout.run_dir(key), "--frame", len(layout.frame_paths(key)) // 2)
        break
endef
export FIRST_FINISHED

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
