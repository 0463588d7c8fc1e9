# Two commands set everything up on a fresh machine:
#   make demo   virtualenv + packages + Delta JARs (cached), then the demo
#   make test   the same plus test tools, then the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The suite's tests run in this many processes, a module each at a time (each its own
# SparkSession): most of a test's time is the driver's, one core each.
TEST_WORKERS ?= 2

.PHONY: demo test test-fast lint jars bench bench-catalog bench-ceiling bench-growth bench-sustained bench-state-floor bench-tuning bench-days bench-peers \
	bench-sessionize bench-lag-scrape bench-latency bench-maintain bench-serve chaos bench-deps system-deps clean help
.DEFAULT_GOAL := help

help:
	@echo "make demo   set up and run the demo (generate -> ingest -> sessionize -> metrics)"
	@echo "make test   set up and run the whole test suite"
	@echo "make bench  speed-layer throughput against a naive Spark chain and a parse floor, then what"
	@echo "            the metric catalog costs it (bench-catalog) (ARGS='--events N')"
	@echo "make bench-catalog    the speed layer before the catalog, with the default one and with 20 definitions"
	@echo "make bench-ceiling    each piece of the work as a plain batch job: the floor to approach"
	@echo "make bench-growth     time, memory and state at 1M, 5M and 20M beacons, with a chart"
	@echo "make bench-sustained  the highest rate with every component's lag under 30 s (--live --hold N: a steady state, its slopes)"
	@echo "make bench-state-floor  a live micro-batch's state work at a steady state (5,000 and 10,000/s), per state design"
	@echo "make bench-maintain   what maintain compacts and vacuums after the speed layer on 20M beacons"
	@echo "make bench-days       7 days of event time through the running speed layer, maintain daily: sizes per day and their growth"
	@echo "make bench-tuning     the speed layer with each tuning setting undone, against the default"
	@echo "make bench-serve      abstream serve's latency and the results page's load time, 20 experiments"
	@echo "make bench-peers      the speed layer against Flink SQL (PyFlink) and the idiomatic Structured Streaming job, same beacons"
	@echo "make bench-sessionize / bench-lag-scrape / bench-latency  the other benchmarks"
	@echo "make chaos  kill -9 the speed layer (and the batch layer) at random moments: nothing lost"
	@echo "            or duplicated (ARGS='--source kafka', '--kills N')"
	@echo "make chaos ARGS='--standby'  two replicas under kills, pauses and store restarts:"
	@echo "            failovers timed, no stale write, the store equal to a crash-free run"
	@echo "            (every benchmark writes its results to bench/results/)"
	@echo "make lint   ruff, and the import contracts between layers (pyproject.toml)"

system-deps:
	@scripts/install-system-deps.sh $(if $(filter test test-fast,$(MAKECMDGOALS)),test,run)

# GrowthBook's stats engine is the tests' oracle for the statistics. Its package metadata
# asks for numpy<2 and pandas<2, which PySpark 4.2's own pins rule out; the modules the tests
# use (gbstats.frequentist, gbstats.models) run on these, so it is installed without them.
GBSTATS := gbstats==0.8.0

$(STAMP): pyproject.toml constraints.txt Makefile | system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps $(GBSTATS)
	touch $@

jars: $(STAMP)
	@$(BIN)/abstream jars > /dev/null

demo: $(STAMP) jars
	$(BIN)/abstream demo $(ARGS)

test: $(STAMP) jars lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 $(PYTEST_ARGS)

test-fast: $(STAMP) jars
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

bench-deps: $(STAMP) jars
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"

bench: bench-deps
	$(BIN)/python -m bench.throughput $(ARGS)
	$(BIN)/python -m bench.catalog_cost $(ARGS)

bench-catalog: bench-deps
	$(BIN)/python -m bench.catalog_cost $(ARGS)

bench-ceiling: bench-deps
	$(BIN)/python -m bench.ceiling $(ARGS)

bench-growth: bench-deps
	$(BIN)/python -m bench.growth $(ARGS)

bench-maintain: bench-deps
	$(BIN)/python -m bench.maintain $(ARGS)

bench-days: bench-deps
	$(BIN)/python -m bench.days $(ARGS)

bench-sustained: bench-deps
	$(BIN)/python -m bench.sustained $(ARGS)

bench-tuning: bench-deps
	$(BIN)/python -m bench.tuning $(ARGS)

bench-peers: bench-deps
	$(BIN)/python -m pip install --quiet --no-deps -r bench/flink-requirements.txt
	$(BIN)/python -m bench.peers $(ARGS)

bench-state-floor: bench-deps
	$(BIN)/python -m bench.state_floor $(ARGS)

bench-sessionize: bench-deps
	$(BIN)/python -m bench.sessionize $(ARGS)

bench-lag-scrape: bench-deps
	$(BIN)/python -m bench.lag_scrape $(ARGS)

bench-latency: $(STAMP) jars
	$(BIN)/python -m bench.latency $(ARGS)

bench-serve: $(STAMP) jars
	$(BIN)/python -m bench.serve_latency $(ARGS)

chaos: bench-deps
	$(BIN)/python -m bench.chaos $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) abstream-data .pytest_cache .ruff_cache
