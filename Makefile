# Two commands do all the set-up on a fresh machine:
#   make demo   – install into .venv, then run the bundled default scenario (scenarios/kill-worker.yaml)
#   make test   – install into .venv, then run the test suite's fast tier (CI; tests/tiers.py)
# make test-full runs every test (the fast tier and every full-tier variant); make journals re-records the
# stored real journals of tests/journals/ from real runs; make docs builds the documentation site (mkdocs.yml,
# docs/) into build/site.
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0

.PHONY: demo test test-full test-unit journals lint typecheck docs bench clean system

# Debian packages (Docker engine, iptables, NFQUEUE library, FUSE) and a running dockerd, if root
system:
	./scripts/setup-system.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch first, the CPU build, so nothing later pulls a multi-GB CUDA wheel
	$(VENV)/bin/pip install -q $(TORCH)
	$(VENV)/bin/pip install -q -e '.[test,dev,docs]'
	touch $@

demo: system $(VENV)/.installed
	$(VENV)/bin/chaos run scenarios/kill-worker.yaml

# the fast tier: every unit test and one real job per capability, in three phases (scripts/run-tests.sh)
test: system $(VENV)/.installed
	PYTHON=$(VENV)/bin/python ./scripts/run-tests.sh fast

# everything: the fast tier and every full-tier variant (the matrices, the other backends, the soaks)
test-full: system $(VENV)/.installed
	PYTHON=$(VENV)/bin/python ./scripts/run-tests.sh full

# the unit tests alone (pure functions and stored journals: no real job), a minute
test-unit: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -n 2 tests/unit

# re-record tests/journals/ from real runs (then review the diff of their expected.json)
journals: system $(VENV)/.installed
	$(VENV)/bin/python -m tests.journals.record

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check chaos targets tests benchmarks noxfile.py

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

# the documentation site (mkdocs.yml, docs/) into build/site; --strict: a broken link or any warning fails
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

bench: $(VENV)/.installed
	$(VENV)/bin/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) .chaos-runs .test-cache .nox .pytest_cache .mypy_cache .ruff_cache
