# Parley. `make demo` runs the main job on the embedded default; `make test` installs and runs the suite.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint run migrate bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# --fresh: the demo empties demo.sqlite3 itself, once it holds its lock (a running demo keeps it).
demo: $(STAMP)
	env -u REDIS_URL DATABASE_URL=sqlite:///demo.sqlite3 $(BIN)/python manage.py demo --fresh $(DEMO_ARGS)

# The suite on Postgres, Redis and Chromium; then, every test that needs none of them, on SQLite.
test: $(STAMP)
	scripts/ensure-chromium
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(BIN)/python -m pytest --ds=parley.settings.test_sqlite $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy .
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null
	env -u DJANGO_SETTINGS_MODULE $(BIN)/python scripts/import-benchmarks

run: $(STAMP)
	$(BIN)/python manage.py migrate
	$(BIN)/python -m uvicorn parley.asgi:application --host 127.0.0.1 --port 8000

migrate: $(STAMP)
	$(BIN)/python manage.py migrate

bench: $(STAMP)
	$(BIN)/pip install --quiet -e ".[bench]"
	$(BIN)/python bench/deals.py
	$(BIN)/python bench/run.py
	$(BIN)/python bench/negotiate.py
	$(BIN)/python bench/steps.py
	$(BIN)/python bench/gateway.py
	$(BIN)/python bench/exchange.py
	$(BIN)/python bench/live.py
	$(BIN)/python bench/inbound.py
	$(BIN)/python bench/pages.py
	$(BIN)/python bench/scale.py

clean:
	rm -rf $(VENV) demo.sqlite3* parley.sqlite3*
