# Two commands do everything: `make run` starts the whole product, `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Local defaults; any of them can be overridden from the environment.
export DJANGO_DEBUG ?= 1

.PHONY: help install system-packages run test lint typecheck messages bench clean

help:
	@echo "make run    start web, worker and beat on local PostgreSQL and Redis"
	@echo "make test   lint, type-check and run the whole test suite"
	@echo "make bench  run the benchmarks in bench/, one JSON line each"

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

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy .

system-packages:
	@bash scripts/system-packages.sh

test: install system-packages lint typecheck
	REDIS_URL=$${TEST_REDIS_URL:-redis://127.0.0.1:6379/15} \
	CELERY_BROKER_URL=$${TEST_BROKER_URL:-redis://127.0.0.1:6379/14} \
	CELERY_TASK_DEFAULT_QUEUE=gpulots-test \
	$(BIN)/pytest $(PYTEST_ARGS)

messages: install
	$(BIN)/python manage.py makemessages -l de -l fr --no-obsolete --ignore=.venv --ignore=node_modules --ignore=tests --ignore=bench --ignore=var
	$(BIN)/python manage.py compilemessages --ignore=.venv --ignore=node_modules

bench: install
	@set -e; for script in bench/*.py; do \
		case $$script in */benchdb.py) continue;; esac; $(BIN)/python $$script; done

clean:
	rm -rf $(VENV) node_modules var test-artifacts .pytest_cache .mypy_cache .ruff_cache
