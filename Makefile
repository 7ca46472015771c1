# Agent Ops — the two commands a fresh machine needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test install migrate seed lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

migrate: $(STAMP)
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py demo_seed

## Set up and serve on :8000. Embedded by default (SQLite, in-process worker, no Redis);
## with DATABASE_URL and REDIS_URL set: PostgreSQL, Redis broker, separate Celery workers.
run: seed
	bin/serve

## The whole suite against the local PostgreSQL and Redis (fails if either is down).
test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy agents traces policies reviews
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy agents traces policies reviews

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) db.sqlite3 var
