# The two commands the README promises.
.PHONY: demo test bench

demo:  ## run the demo control plane (SQLite, live sample traffic)
	scripts/demo.sh

test:  ## create the environments, install, run every test (SQLite and PostgreSQL)
	scripts/test.sh $(ARGS)

# Not one of the two: every benchmark of bench/ in its quick mode, then their headlines
# (docs/benchmarks.md). Needs the dev environment; PostgreSQL and wrk for some.
PYTHON ?= $(if $(wildcard .venv/bin/python),.venv/bin/python,python3)
bench:  ## every bench in quick mode, with a summary (ARGS="--only served proxy")
	PYTHONPATH=.:bench $(PYTHON) bench/all.py --quick $(ARGS)
