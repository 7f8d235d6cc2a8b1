# Two commands on a fresh machine: `make run` and `make test`. Both bootstrap uv and the locked
# environment first. Python 3.11+ must be on PATH; uv is installed with pip when missing.
SHELL := /bin/bash
PYTHON ?= python3
UV := $(shell command -v uv 2>/dev/null || echo "$(PYTHON) -m uv")
export UV_PYTHON_DOWNLOADS := never
# A data root in a bucket (REWARDHOUSE_HOME=s3://...) needs the `scale` extra; a folder does not.
SCALE := $(if $(filter s3://%,$(REWARDHOUSE_HOME)),--extra scale,)

.PHONY: bootstrap run test test-fast dev bench validate clean

bootstrap:
	@$(UV) --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet uv
	@# bytecode compiled at install: where PYTHONDONTWRITEBYTECODE=1 is set nothing would ever be
	@# cached, and every command would compile Dagster again at start-up
	@$(UV) sync --frozen --quiet --inexact --compile-bytecode
	@$(UV) run --frozen python -m checks.web_assets fetch

run: bootstrap
	$(UV) run --frozen $(SCALE) rewardhouse run

# The whole suite needs the `scale` extra (obstore, ray) and moto's S3 server; `make run` does not.
# Test files run side by side, one worker per core (at most 4), each file whole on one worker (its
# module fixtures, a published release most often, are built once).
test: bootstrap
	$(UV) run --frozen --all-extras pytest -q -n auto --maxprocesses 4 --dist loadfile

test-fast: bootstrap
	$(UV) run --frozen pytest -q -m fast

# The Dagster home: DAGSTER_HOME, else <data root>/dagster (for a bucket root, in its local scratch folder),
# holding this dagster.yaml, so CLI runs and the UI share one run history.
DAGSTER_HOME_SET = home="$${DAGSTER_HOME:-$$($(UV) run --frozen $(SCALE) python -c 'from pipeline.settings import Layout; print(Layout().dagster_home)')}"; \
	mkdir -p "$$home"; cmp -s dagster.yaml "$$home/dagster.yaml" || cp dagster.yaml "$$home/dagster.yaml"

dev: bootstrap
	@$(DAGSTER_HOME_SET); \
	echo "DAGSTER_HOME=$$home"; \
	DAGSTER_HOME="$$home" exec $(UV) run --frozen $(SCALE) dg dev --host "$${REWARDHOUSE_UI_HOST:-127.0.0.1}" --port "$${REWARDHOUSE_UI_PORT:-3000}"

bench: bootstrap
	$(UV) run --frozen python tests/benchmarks/bench_mmrb2_images.py
	$(UV) run --frozen python tests/benchmarks/bench_visualprm_parse.py
	$(UV) run --frozen python tests/benchmarks/bench_hashing.py
	$(UV) run --frozen python tests/benchmarks/bench_search.py
	$(UV) run --frozen python tests/benchmarks/bench_dedupe_quality.py
	$(UV) run --frozen python tests/benchmarks/bench_verify.py
	$(UV) run --frozen python tests/benchmarks/bench_review.py
	$(UV) run --frozen python tests/benchmarks/bench_text_leaks.py
	$(UV) run --frozen python tests/benchmarks/bench_record_leaks.py
	$(UV) run --frozen python tests/benchmarks/bench_startup.py
	$(UV) run --frozen python tests/benchmarks/bench_diff.py
	$(UV) run --frozen python tests/benchmarks/bench_rlaifv.py
	$(UV) run --frozen python tests/benchmarks/bench_fullscale.py
	$(UV) run --frozen --all-extras python tests/benchmarks/bench_scale.py

# Dagster's dg CLI ([tool.dg] in pyproject.toml): `dg dev` above, `dg check defs` here.
validate: bootstrap
	$(UV) run --frozen $(SCALE) dg check defs

clean:
	rm -rf .venv .pytest_cache
