# linrnn-bench: `make report` and `make test` do all the set-up on a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PRESET ?= cpu
# Quiet progress bars in CI and in make's logs.
export PYTHONUNBUFFERED := 1

.PHONY: env test report bench asv asv-history lock clean-venv

env: $(STAMP)

# Reinstalled only when the dependency pins change: a second `make test` starts at once.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements.lock -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest tests

report: $(STAMP)
	$(PY) -m harness report --run --preset $(PRESET)

bench: $(STAMP)
	$(PY) -m pytest benchmarks/pytest --benchmark-only --benchmark-enable --benchmark-autosave -p no:randomly

asv: $(STAMP)
	$(VENV)/bin/asv run --python=same --quick --show-stderr --launch-method spawn --set-commit-hash $$(git rev-parse HEAD)

asv-history: $(STAMP)
	$(VENV)/bin/asv run --launch-method spawn $(or $(RANGE),HEAD~5..HEAD) && $(VENV)/bin/asv publish

# Regenerate the lock file from the current environment (after changing pins in pyproject.toml).
lock:
	$(PY) -m pip freeze --exclude-editable | grep -v '^-e ' > requirements.lock

clean-venv:
	rm -rf $(VENV)
