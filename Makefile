# Two commands on a fresh machine: `make run` and `make test`. Both bootstrap uv and the locked
# environment first. Python 3.11+ must be on PATH; uv is installed with pip when missing.
SHELL := /bin/bash
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
export UV_PYTHON_DOWNLOADS := never
HOME_DIR := $(if $(REWARDHOUSE_HOME),$(REWARDHOUSE_HOME),$(CURDIR)/data)
DAGSTER_HOME ?= $(HOME_DIR)/dagster

.PHONY: bootstrap run test test-fast dev bench validate clean

bootstrap:
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet uv
	@$(UV) sync --frozen --quiet --inexact

run: bootstrap
	$(UV) run --frozen rewardhouse run

# The whole suite needs the `scale` extra (obstore, ray) and moto's S3 server; `make run` does not.
test: bootstrap
	$(UV) run --frozen --all-extras pytest -q

test-fast: bootstrap
	$(UV) run --frozen pytest -q -m fast

dev: bootstrap
	@mkdir -p "$(DAGSTER_HOME)"
	@cmp -s dagster.yaml "$(DAGSTER_HOME)/dagster.yaml" || cp dagster.yaml "$(DAGSTER_HOME)/dagster.yaml"
	DAGSTER_HOME="$(DAGSTER_HOME)" $(UV) run --frozen dagster dev -h "$${REWARDHOUSE_UI_HOST:-127.0.0.1}" -p "$${REWARDHOUSE_UI_PORT:-3000}"

bench: bootstrap
	$(UV) run --frozen python tests/benchmarks/bench_mmrb2_images.py
	$(UV) run --frozen python tests/benchmarks/bench_visualprm_parse.py
	$(UV) run --frozen python tests/benchmarks/bench_hashing.py
	$(UV) run --frozen python tests/benchmarks/bench_search.py
	$(UV) run --frozen python tests/benchmarks/bench_dedupe_quality.py

validate: bootstrap
	$(UV) run --frozen dagster definitions validate

clean:
	rm -rf .venv .pytest_cache
