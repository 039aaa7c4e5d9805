# drivekit: the two set-up commands on a fresh machine are `make demo` and `make test`.
# Every variable below can be overridden: make demo DEMO=/tmp/demo DEMO_ROUTES=8 WORKERS=4, make demo PRESET=medium

PYTHON ?= python3
VENV ?= .venv
PIP_FLAGS ?=
DEMO ?= demo
DEMO_ROUTES ?= 8
WORKERS ?= 2
PRESET ?=
PYTEST_ARGS ?=
TEST_WORKERS ?= 2
APPTAINER ?= apptainer
APPTAINER_FLAGS ?=
IMAGES ?= containers/carla.sif containers/train.sif

PY := $(VENV)/bin/python
comma := ,
# The base package (make install, make demo), and the test tools with the py123d extra on top (make test, make lint).
STAMP := $(VENV)/.stamp
TEST_STAMP := $(VENV)/.stamp-test
# CARLA's real towns (OpenDRIVE from the py123d wheel on PyPI): the tests drive the expert on them and walk
# every town's lane graph (tests/expert/test_planner_towns.py), the leaderboard 2.0 towns Town11 to Town15 included.
CARLA_TOWNS_DIR ?= .cache/carla-towns
CARLA_TOWN_NAMES ?= Town01,Town02,Town03,Town04,Town05,Town06,Town07,Town10HD,Town11,Town12,Town13,Town15
# The carla-dependent tests run a second time under CARLA 0.9.15's client (make test's last step): a venv holding
# only that client, whose .pth adds $(VENV)'s site-packages after its own, so `import carla` is 0.9.15's and
# everything else is $(VENV)'s. The cheap subset (every town's lane graph under 0.9.15 takes about 3 minutes, which
# the suite's budget has not: CARLA15_TESTS=... widens it): the release checks, carla-check over the stand-ins with
# its route checks, and the lane graph and field routes of Town03 and Town15 (the one town whose lane graph the two
# clients walk differently: docs/carla.md).
VENV15 ?= .venv-carla15
CARLA15_TESTS ?= tests/collect/carla/test_carla_versions.py tests/collect/carla/test_carla_check.py \
	tests/expert/test_planner_towns.py -k 'not every_town or Town03 or Town15'
CARLA15_STAMP := $(VENV15)/.stamp
# Named after the list, so that a folder extracted with fewer towns gets the missing ones.
TOWNS_STAMP := $(CARLA_TOWNS_DIR)/.stamp-$(subst $(comma),-,$(CARLA_TOWN_NAMES))
# Every file in bin/, bin/lib/, .ci/, slurm/ and slurm/lib/, and containers/*.sh (tests/test_bin.py lists the same); exceptions in .shellcheckrc.
SHELL_SCRIPTS = $(filter-out bin/lib slurm/lib,$(wildcard bin/* bin/lib/* .ci/* slurm/* slurm/lib/* containers/*.sh))
# The code version baked into the images (the manifest's `code` where no git checkout is: docs/dataset-format.md).
GIT_COMMIT = $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
GIT_DIRTY = $(shell git rev-parse HEAD >/dev/null 2>&1 && { git status --porcelain --untracked-files=no | grep -q . \
	&& echo true || echo false; } || echo unknown)
IMAGE_SOURCES = pyproject.toml $(wildcard README.md containers/*.sh) $(shell find tools -name '*.py' -not -path '*/__pycache__/*')

# Debian packages of the real one-node SLURM cluster that the tests start (tests/slurm_cluster.py).
SLURM_PACKAGES ?= slurm-wlm munge slurmdbd mariadb-server

.PHONY: install towns test test-deps lint bench demo images clean distclean carla15
.DELETE_ON_ERROR:

install: $(STAMP)

# The virtualenv is rebuilt when pyproject.toml changes. The base package is what the pipeline needs; the
# py123d extra (ray, jupyterlab, geopandas, ...: 1.5 GB more) only Py123D export and the tests do.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) -e .
	touch $@

$(TEST_STAMP): $(STAMP)
	$(PY) -m pip install $(PIP_FLAGS) -e '.[dev,py123d]'
	touch $@

towns: $(TOWNS_STAMP)

carla15: $(CARLA15_STAMP)

# The client's pip requirement is versions.py's (RELEASES["0.9.15"].client).
$(CARLA15_STAMP): $(TEST_STAMP)
	$(PY) -m venv --clear $(VENV15)
	$(VENV15)/bin/python -m pip install $(PIP_FLAGS) --no-deps \
	  "$$($(PY) -c 'from tools.collect.carla.versions import RELEASES; print(RELEASES["0.9.15"].client)')"
	$(PY) -c 'import site; print(f"import site; site.addsitedir({site.getsitepackages()[0]!r})")' \
	  > "$$($(VENV15)/bin/python -c 'import site; print(site.getsitepackages()[0])')/zz_drivekit_venv.pth"
	$(VENV15)/bin/python -c 'from tools.collect.base.town import carla_client_version as v; assert v() == "0.9.15", v()'
	touch $@

$(TOWNS_STAMP): | $(STAMP)
	$(PY) -m tools.collect carla-towns --out $(CARLA_TOWNS_DIR) --towns $(CARLA_TOWN_NAMES)
	touch $@

# Where test-deps can install them (root with apt-get: CI), the SLURM tests must run, not skip.
DRIVEKIT_REQUIRE_SLURM ?= $(shell [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo 1 || echo 0)

# A run keeps at most about 1.5 GB under $$TMPDIR at once (passing tests' folders are removed as they end:
# pyproject.toml); a full disk fails tests far from their cause, so a run with less free says so first.
TEST_TMP_MB ?= 3000

test: $(TEST_STAMP) $(TOWNS_STAMP) $(CARLA15_STAMP) test-deps
	@tmp=$${TMPDIR:-/tmp}; free=$$(df -Pm "$$tmp" | awk 'NR==2 {print $$4}'); \
	if [ "$$free" -lt $(TEST_TMP_MB) ]; then \
	  echo "make test: only $$free MB free in $$tmp, and a run needs about $(TEST_TMP_MB) MB there:" \
	       "free some space (or set TMPDIR to a folder on a larger disk); tests may fail with 'No space left'" >&2; \
	fi
	DRIVEKIT_REQUIRE_SLURM=$(DRIVEKIT_REQUIRE_SLURM) DRIVEKIT_CARLA_TOWNS=$(abspath $(CARLA_TOWNS_DIR)) \
	  $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)
	@echo "make test: the carla-dependent tests again under CARLA 0.9.15's client ($(VENV15))"
	DRIVEKIT_CARLA_TOWNS=$(abspath $(CARLA_TOWNS_DIR)) $(VENV15)/bin/python -m pytest -q $(CARLA15_TESTS)

# Installs the missing SLURM_PACKAGES (one dpkg-query when none is missing). policy-rc.d answers 101 during
# the install so that no package starts its service (munge, mariadb, slurmctld, slurmd, slurmdbd): the
# tests start their own daemons. Not root: says what to run and goes on (the SLURM tests then skip).
test-deps:
	@missing=; for p in $(SLURM_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q ' installed$$' || missing="$$missing $$p"; \
	done; \
	[ -n "$$missing" ] || exit 0; \
	if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make test: missing Debian packages:$$missing; the SLURM tests will be skipped." \
	       "Install them as root: apt-get install -y --no-install-recommends$$missing (or: sudo make test-deps)" >&2; \
	  exit 0; \
	fi; \
	echo "make test: installing$$missing (services stay stopped)"; \
	policy=/usr/sbin/policy-rc.d; saved=; \
	if [ -e "$$policy" ]; then saved=$$(mktemp) && cp -p "$$policy" "$$saved"; fi; \
	trap 'if [ -n "$$saved" ]; then mv -f "$$saved" "$$policy"; else rm -f "$$policy"; fi' EXIT; \
	printf '#!/bin/sh\nexit 101\n' > "$$policy" && chmod 755 "$$policy"; \
	export DEBIAN_FRONTEND=noninteractive; \
	apt-get update -q && apt-get install -y -q --no-install-recommends $$missing

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/shellcheck -o all $(SHELL_SCRIPTS)
	$(VENV)/bin/lint-imports

bench: $(STAMP)
	@set -e; for bench in $(wildcard benchmarks/bench_*.py); do \
	  echo "== $$bench"; $(PY) "$$bench"; \
	done

# The whole pipeline on the embedded world (bin/demo): town, routes, collection, buckets, cache,
# pretrain, posttrain, closed-loop evaluation, then a summary. Rerunning skips finished route runs and resumes
# training. PRESET=medium (or tiny, small) runs bin/demo --preset PRESET: its routes, workers, seeds and towns.
# PRESET=bench2drive BENCH2DRIVE=~/Bench2Drive: the field's protocol on your Bench2Drive checkout (docs/training.md).
demo: $(STAMP)
	$(if $(PRESET),bin/demo --preset $(PRESET) $(if $(BENCH2DRIVE),--bench2drive $(BENCH2DRIVE)) $(DEMO),DEMO_ROUTES=$(DEMO_ROUTES) WORKERS=$(WORKERS) bin/demo $(DEMO))

images: $(IMAGES)

# An image holds our package, so it is rebuilt when the code changes.
containers/%.sif: containers/%.def $(IMAGE_SOURCES)
	@command -v $(APPTAINER) >/dev/null 2>&1 || { \
	  echo "make images: '$(APPTAINER)' not found: install Apptainer (https://apptainer.org/docs/admin/main/installation.html)," \
	       "or skip the images: the bin/ wrappers run on the host's .venv without them" >&2; exit 1; }
	$(APPTAINER) build $(APPTAINER_FLAGS) --build-arg DRIVEKIT_COMMIT=$(GIT_COMMIT) \
	  --build-arg DRIVEKIT_DIRTY=$(GIT_DIRTY) --force $@ $<

clean:
	rm -rf $(DEMO) .pytest_cache .ruff_cache *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(VENV15) $(IMAGES) .cache
