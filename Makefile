# lipgnn — every command a researcher needs. `make demo` first, `make test` second.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# Offline datasets: LIPGNN_DATA wins; else ../shared/datasets when present; else ./data (downloaded there).
LIPGNN_DATA ?= $(if $(wildcard ../shared/datasets),$(abspath ../shared/datasets),$(abspath data))
export LIPGNN_DATA
RESULTS ?= results
EXP ?= table3
BUDGET ?= cpu

.PHONY: install demo verify test test-slow lint tables figures report docs sweep sweep-status summarize bench bench-tiny clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: a bare `torch` requirement would pull a multi-GB CUDA build on CPU-only machines.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

install: $(VENV)/.installed

demo: install  ## a 15-layer GAT that fails and a GAT-Lip that trains: gradient norms, curves, a plot (under 2 min after install on one shared core; results/demo/)
	$(PY) scripts/demo.py

verify: install  ## rerun committed records here and report whether they reproduce (results/verify/): make verify ARGS="--sample 10" (default) or ARGS="table3/<run id>"
	$(VENV)/bin/lipgnn verify --results-dir $(RESULTS) $(if $(ARGS),$(ARGS),--sample 10)

test: install  ## the test suite (CI runs exactly this)
	$(PY) -m pytest

test-slow: install  ## long training tests kept out of `make test`
	$(PY) -m pytest -m slow

lint: install
	$(PY) -m ruff check .

tables: install  ## results/tables/table{1,2,3}.{md,tex,csv} from the run records
	$(PY) scripts/make_tables.py --results-dir $(RESULTS)

figures: install  ## results/figures/fig{2..6}.{png,pdf} from the run records
	$(PY) scripts/make_figures.py --results-dir $(RESULTS)

report: install  ## results/REPRODUCTION.md: refresh its auto-generated number blocks from the run records
	$(PY) scripts/make_report.py --results-dir $(RESULTS)

docs: install  ## README.md and docs/: refresh their generated blocks (demo, bench numbers, config reference)
	$(PY) scripts/make_docs.py

sweep: install  ## run one experiment's sweep here: make sweep EXP=table3 BUDGET=cpu ARGS="hydra.launcher.n_jobs=1 train.epochs=50"
	$(PY) train.py -m experiment=$(EXP) budget=$(BUDGET) results_dir=$(RESULTS) hydra/launcher=local $(ARGS)

sweep-status: install  ## done / diverged / failed / missing / outside-the-grid runs of a sweep: make sweep-status EXP=table3
	$(VENV)/bin/lipgnn sweep-status $(EXP) --results-dir $(RESULTS) budget=$(BUDGET) $(ARGS)

summarize: install  ## mean ± std per configuration + per-run curves of any results folder: make summarize RESULTS=outputs
	$(VENV)/bin/lipgnn summarize $(RESULTS)

bench: install  ## deep-attention speed/memory benchmark -> results/bench/summary.csv; a device probe instead: make bench ARGS="--probe determinism|launches|cuda-graph --device cuda"
	$(PY) -m lipgnn.bench --threads 1 --out $(RESULTS)/bench $(ARGS)

bench-tiny: install
	$(PY) -m lipgnn.bench --tiny --threads 1 --out /tmp/lipgnn-bench-tiny

clean:
	rm -rf .cache .pytest_cache
