# Two commands do everything: `make run` starts the whole product, `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Local defaults; any of them can be overridden from the environment.
export DJANGO_DEBUG ?= 1

.PHONY: help install system-packages run pay test test-fast lint typecheck docs docs-serve messages bench clean

help:
	@echo "make run    start web, worker and beat on local PostgreSQL and Redis"
	@echo "make test   lint, type-check and run the whole test suite"
	@echo "make bench  run the benchmarks in bench/, one JSON line each"
	@echo "make docs   build the documentation site into var/site (docs-serve: serve it)"
	@echo "make pay REF=<reference>  pay an order on the local dev chain (under make run)"
	@echo "make test-fast  the unit layer only, for the edit loop"

$(STAMP): requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.lock
	@touch $(STAMP)

NODE_STAMP := node_modules/.installed

$(NODE_STAMP): package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

run: install
	$(BIN)/python scripts/devstack.py

# Pays an order in full on the dev chain that `make run` started (same database and chain).
pay: install
	@test -n "$(REF)" || { echo "usage: make pay REF=<the order's reference>" >&2; exit 2; }
	$(BIN)/python manage.py devchain pay $(REF)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy .

system-packages:
	@bash scripts/system-packages.sh

TEST_ENV = REDIS_URL=$${TEST_REDIS_URL:-redis://127.0.0.1:6379/15} \
	CELERY_BROKER_URL=$${TEST_BROKER_URL:-redis://127.0.0.1:6379/14} \
	CELERY_TASK_DEFAULT_QUEUE=gpulots-test

# The suite on TEST_PROCESSES processes (pytest-xdist, a test file to a process; each with
# its own database, Redis, chain, worker and browser: tests/parallel.py); the 20 slowest
# tests are printed at the end. TEST_PROCESSES=0 runs it in this one process.
TEST_PROCESSES ?= 3
PYTEST = $(TEST_ENV) $(BIN)/python -m pytest -p tests.parallel

test: install system-packages lint typecheck docs
	$(PYTEST) -n $(TEST_PROCESSES) --dist loadfile --durations=20 $(PYTEST_ARGS)

# The unit layer for the edit loop: what starts no worker, browser, chain, sshd, benchmark
# or make run (the `slow` marker, set in tests/conftest.py).
test-fast: install
	$(PYTEST) -n 2 -m "not slow" $(PYTEST_ARGS)

docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet --site-dir var/site

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --dev-addr $${DOCS_ADDR:-127.0.0.1:8001}

messages: install
	$(BIN)/python manage.py makemessages -l de -l fr --no-obsolete --ignore=.venv --ignore=node_modules --ignore=tests --ignore=bench --ignore=var
	$(BIN)/python manage.py compilemessages --ignore=.venv --ignore=node_modules

bench: install
	@set -e; for script in bench/*.py; do \
		case $$script in */benchdb.py) continue;; esac; $(BIN)/python $$script; done

clean:
	rm -rf $(VENV) node_modules var test-artifacts .pytest_cache .mypy_cache .ruff_cache
