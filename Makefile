# The two commands a newcomer needs: `make lab` (open the notebooks) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Jupyter refuses to start as root (containers, CI) unless told it may.
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test setup-lab setup-test chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

setup-lab: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[lab]"

setup-test: $(BIN)/python chromium
	$(BIN)/pip install --quiet -e ".[test]"

chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium fonts-wqy-zenhei; }

lab: setup-lab
	$(BIN)/jupyter lab $(LAB_FLAGS) notebooks/

test: setup-test
	$(BIN)/ruff check sessionkit tests benchmarks scripts notebooks
	$(BIN)/ruff format --check sessionkit tests benchmarks scripts notebooks
	$(BIN)/pytest
