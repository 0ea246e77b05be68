# The same commands as the README and .ci/run. PYTHON=python3 where "python" is missing.
PYTHON ?= python
MAX_JOBS ?= 2
BENCH_ARGS ?=

.PHONY: install test bench tables plot ci gpu-check

install:
	MAX_JOBS=$(MAX_JOBS) $(PYTHON) -m pip install --no-build-isolation -e .

test:
	$(PYTHON) -m pytest -q tests

bench:
	$(PYTHON) benchmarks/bench_softmax.py $(BENCH_ARGS)
	$(PYTHON) benchmarks/bench_attention.py $(BENCH_ARGS)

tables:
	$(PYTHON) benchmarks/tables.py

plot:
	$(PYTHON) benchmarks/plot.py

ci:
	bash .ci/run

gpu-check:
	bash scripts/gpu_check.sh
