# Two commands do all the set-up on a fresh machine:
#   make demo   – install into .venv, then run the bundled default scenario (scenarios/kill-worker.yaml)
#   make test   – install into .venv, then run the test suite
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0

.PHONY: demo test test-fast lint typecheck bench clean system

# Debian packages (Docker engine, iptables, NFQUEUE library, FUSE) and a running dockerd, if root
system:
	./scripts/setup-system.sh

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# torch first, the CPU build, so nothing later pulls a multi-GB CUDA wheel
	$(VENV)/bin/pip install -q $(TORCH)
	$(VENV)/bin/pip install -q -e '.[test,dev]'
	touch $@

demo: system $(VENV)/.installed
	$(VENV)/bin/chaos run scenarios/kill-worker.yaml

# three phases, each run even if an earlier one failed; the target fails if any did
test: system $(VENV)/.installed
	@rc=0; \
	$(VENV)/bin/python -m pytest -v --durations=25 -n 2 --dist worksteal -m "not timing and not exclusive" || rc=1; \
	$(VENV)/bin/python -m pytest -v --durations=15 -n 2 --dist worksteal -m timing || rc=1; \
	$(VENV)/bin/python -m pytest -v --durations=10 -p no:xdist -m exclusive || rc=1; \
	exit $$rc

test-fast: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -m "not e2e"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check chaos targets tests benchmarks noxfile.py

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

bench: $(VENV)/.installed
	$(VENV)/bin/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) .chaos-runs .nox .pytest_cache .mypy_cache .ruff_cache
