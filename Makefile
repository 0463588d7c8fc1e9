# Two commands set everything up on a fresh machine:
#   make demo   virtualenv + packages + Delta JARs (cached), then the demo
#   make test   the same plus test tools, then the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint jars bench bench-latency system-deps clean help
.DEFAULT_GOAL := help

help:
	@echo "make demo   set up and run the demo (generate -> ingest -> sessionize -> metrics)"
	@echo "make test   set up and run the whole test suite"
	@echo "make bench  benchmarks (results in bench/results/)"
	@echo "make bench-latency  Kafka validation latency per mode (results in bench/results/)"
	@echo "make lint   ruff"

system-deps:
	@scripts/install-system-deps.sh $(if $(filter test test-fast,$(MAKECMDGOALS)),test,run)

$(STAMP): pyproject.toml constraints.txt | system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $@

jars: $(STAMP)
	@$(BIN)/abstream jars > /dev/null

demo: $(STAMP) jars
	$(BIN)/abstream demo $(ARGS)

test: $(STAMP) jars
	$(BIN)/ruff check src tests bench
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP) jars
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

bench: $(STAMP) jars
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[bench]"
	$(BIN)/python bench/lag_scrape.py
	$(BIN)/python bench/sessionize.py

bench-latency: $(STAMP) jars
	$(BIN)/python bench/latency.py $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

clean:
	rm -rf $(VENV) abstream-data .pytest_cache .ruff_cache
