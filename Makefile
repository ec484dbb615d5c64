# The two commands a newcomer needs: `make lab` (open the notebooks) and `make test`.
# `make notebooks` re-records every notebook's outputs (then commit the diff).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Jupyter refuses to start as root (containers, CI) unless told it may.
LAB_FLAGS := $(if $(filter 0,$(shell id -u)),--allow-root)
# The lab's own settings, not the user's: no news pop-up, no update check (JupyterLab reads
# labconfig/default_setting_overrides.json from every folder on JUPYTER_CONFIG_PATH).
LAB_CONFIG := $(CURDIR)/jupyter-config
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))

.PHONY: lab test notebooks setup-lab setup-test chromium

# `make test NO_BROWSER=1`: no Chromium installed, the explorer's browser tests deselected.
CHROMIUM := $(if $(NO_BROWSER),,chromium)
PYTEST_ARGS := $(if $(NO_BROWSER),-m "not browser")

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

setup-lab: $(BIN)/python
	$(BIN)/pip install --quiet -e ".[lab]"

setup-test: $(BIN)/python $(CHROMIUM)
	$(BIN)/pip install --quiet -e ".[test]"

chromium:
	@command -v chromium >/dev/null || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium fonts-wqy-zenhei; }

# The nanobot releases whose prompt and tools the bundled data's requests need: 0.2.2 for
# data/sessions (notebook 09), 0.3.5 for data/nanobot-0.3.5 (notebook 10).
SAMPLE_RELEASES := 0.2.2 0.3.5

lab: setup-lab
	$(BIN)/sessionkit releases install $(SAMPLE_RELEASES) --missing
	$(BIN)/jupyter trust $(NOTEBOOKS)
	JUPYTER_CONFIG_PATH=$(LAB_CONFIG) $(BIN)/jupyter lab $(LAB_FLAGS) --LabApp.news_url=None notebooks/

# Run every notebook in place, then drop widget state and run-specific metadata, so the diff
# shows only what changed in the outputs.
notebooks: setup-lab
	$(BIN)/sessionkit releases install $(SAMPLE_RELEASES) --missing
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.store_widget_state=False --ExecutePreprocessor.record_timing=False \
	  --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=1200 $(NOTEBOOKS)
	$(BIN)/python scripts/clean_notebooks.py $(NOTEBOOKS)

test: setup-test
	$(BIN)/ruff check sessionkit tests benchmarks scripts notebooks
	$(BIN)/ruff format --check sessionkit tests benchmarks scripts notebooks
	$(BIN)/mypy
	$(BIN)/pytest $(PYTEST_ARGS)
