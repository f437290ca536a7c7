# Two commands for a newcomer: `make demo` and `make test`. Both build the
# virtual environment on first use (and again when pyproject.toml or the lock changes),
# at the versions constraints/development.txt locks. `make test-fast` is the minute's
# check while developing: SQLite only, no download, no slow test.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
EXTRAS := deepseek,test,datasette,minisweagent,postgresql
LOCK := constraints/development.txt
MINIMA := constraints/minima.txt
# the markers tests/conftest.py sets; test-fast leaves them out
FAST_TESTS := not pg and not network and not slow
# test-minima: the wheel at the ranges' lower bounds, in an environment of its own
# (mini-swe-agent's tests download, so its extra is not needed there)
MINIMA_VENV := .venv-minima
MINIMA_EXTRAS := deepseek,test,datasette,postgresql
# which tests run there: the fast ones; MINIMA_TESTS='not network' adds PostgreSQL's
# (psycopg's floor) and the slow ones, once `make postgres-server` has the binaries
MINIMA_TESTS ?= $(FAST_TESTS)
LOCK_VENV := .venv-lock
PG_BIN ?= /usr/lib/postgresql/15/bin
DEMO_DB ?= ctx08.db
DEMO_RECON ?= recon.db
DEMO_REPO := fixtures/repos/shopcart

.PHONY: demo test test-fast test-minima lock lint bench docs postgres-server clean

$(INSTALLED): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(LOCK) -e '.[$(EXTRAS)]'
	touch $@

# The tests start their own throwaway PostgreSQL 15 cluster from these binaries.
postgres-server:
	@test -x $(PG_BIN)/initdb || { \
	  echo "PostgreSQL server binaries missing in $(PG_BIN): installing the postgresql package"; \
	  apt-get update -q && apt-get install -y -q postgresql; }

test: $(INSTALLED) postgres-server
	$(BIN)/pytest

test-fast: $(INSTALLED)
	$(BIN)/pytest -m '$(FAST_TESTS)'

# The wheel installed with the lowest versions pyproject.toml's ranges allow, then the
# fast tests on it (run from the checkout, they import the installed ctxdb: pytest puts
# tests/, not the checkout, on the path).
test-minima:
	rm -rf $(MINIMA_VENV) build/minima
	$(PYTHON) -m venv $(MINIMA_VENV)
	$(MINIMA_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(MINIMA_VENV)/bin/python -m pip wheel --quiet --no-deps -w build/minima .
	$(MINIMA_VENV)/bin/python -m pip install --quiet -c $(MINIMA) \
	  "$$(ls build/minima/ctxdb-*.whl)[$(MINIMA_EXTRAS)]"
	$(MINIMA_VENV)/bin/python -m pip freeze
	$(MINIMA_VENV)/bin/pytest -p no:cacheprovider -m '$(MINIMA_TESTS)'

# Lock the development environment anew: the newest versions the ranges allow, resolved
# in a throwaway environment (commit the new lock after `make test` passes on it).
lock:
	rm -rf $(LOCK_VENV)
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet '.[$(EXTRAS)]'
	{ sed -n '/^#/p' $(LOCK); $(LOCK_VENV)/bin/python -m pip freeze --exclude ctxdb; } > $(LOCK).new
	mv $(LOCK).new $(LOCK)
	rm -rf $(LOCK_VENV)

# The main job on the embedded default: index the fixture repository, construct its
# three decisions (localize, edit, repair after a failing test) into ./ctx08.db.
demo: $(INSTALLED)
	$(BIN)/ctxdb recon index $(DEMO_REPO) --recon $(DEMO_RECON) --rebuild
	@for decision in localize edit repair; do \
	  echo; echo "== $$decision: fixtures/decisions/$$decision.json"; \
	  $(BIN)/ctxdb construct fixtures/decisions/$$decision.json --db $(DEMO_DB) --recon $(DEMO_RECON) --summary || exit 1; \
	done
	@echo; echo "== the edit decision: its summary, then its window exactly as sent"
	@$(BIN)/ctxdb show $$($(BIN)/python -c "import sqlite3; print(sqlite3.connect('$(DEMO_DB)').execute(\"SELECT MAX(decision_id) FROM decision WHERE decision_type = 'edit'\").fetchone()[0])") --db $(DEMO_DB)
	$(BIN)/ctxdb verify --db $(DEMO_DB)
	@echo; echo "== what an analyst runs next (sqlite3 $(DEMO_DB)):"
	@for query in \
	  "SELECT decision_id, decision_type, pool_items, window_items, token_count, token_ceiling FROM v_decision_overview ORDER BY decision_id DESC LIMIT 3;" \
	  "SELECT decision_id, verdict, driver, COUNT(*) AS items FROM v_item_verdict GROUP BY decision_id, verdict, driver ORDER BY decision_id DESC, items DESC LIMIT 12;" \
	  "SELECT stage, action, driver FROM v_why WHERE decision_id = (SELECT MAX(decision_id) FROM decision) AND item_id = 'E7' ORDER BY event_no;"; do \
	  echo; echo "sqlite> $$query"; \
	  $(BIN)/python -c "import sqlite3, sys; c = sqlite3.connect('$(DEMO_DB)'); cur = c.execute(sys.argv[1]); print(' | '.join(d[0] for d in cur.description)); [print(' | '.join(map(str, r))) for r in cur]" "$$query"; \
	done

lint: $(INSTALLED)
	$(BIN)/ruff check ctxdb tests bench migrations examples tools
	$(BIN)/mypy

bench: $(INSTALLED)
	$(BIN)/python bench/recon_index.py
	$(BIN)/python bench/construct.py

# the generated pages of docs/, rewritten after a change of the schema or of a command's
# options (tests/test_analyst.py and tests/test_docs.py fail while they are stale)
docs: $(INSTALLED)
	$(BIN)/python -c 'from ctxdb.analyst import write_schema_doc_view; write_schema_doc_view()'
	$(BIN)/ctxdb db schema-docs -o docs/schema.md
	$(BIN)/python -m ctxdb.docs_cli -o docs/cli.md

# the script a new SQLite store is made from, regenerated after adding a migration
head-schema: $(INSTALLED)
	$(BIN)/python -c 'from ctxdb.migrate import head_schema_script; import sys; sys.stdout.write(head_schema_script())' > sql/schema/head.sqlite.sql

clean:
	rm -rf $(VENV) $(MINIMA_VENV) $(LOCK_VENV) $(DEMO_DB) $(DEMO_DB)-wal $(DEMO_DB)-shm $(DEMO_RECON) $(DEMO_RECON)-wal $(DEMO_RECON)-shm
