# gpumon: `make run` and `make test` work on a fresh clone (they create .venv as needed).
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
# Two stamps: `make run` installs gpumon and what it runs with; `make test` adds the dev extra.
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
FAKE := build/fakenvml

.PHONY: run test fakenvml bench bench-detect bench-real gpu-check clean lint

$(STAMP): setup.cfg pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q -e .
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(VPY) -m pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

# gpumon on this machine's GPUs; without an NVIDIA driver, the simulated demo node.
# (`gpumon list` exits 6 with no GPU, 9 with no loaded/usable driver, 12 with no NVML library.)
run: $(STAMP)
	@$(VENV)/bin/gpumon list >/dev/null 2>&1; rc=$$?; \
	if [ $$rc -eq 6 ] || [ $$rc -eq 9 ] || [ $$rc -eq 12 ]; then \
	  if [ $$rc -eq 6 ]; then why="no NVIDIA GPU here"; else why="no NVIDIA driver here"; fi; \
	  note="make run: $$why, running the SIMULATED demo node"; \
	  echo "$$note (gpumon --sim demo)"; \
	  exec env GPUMON_SCREEN_NOTE="$$note" $(VENV)/bin/gpumon --sim demo $(ARGS); \
	else exec $(VENV)/bin/gpumon $(ARGS); fi

# The fake NVML library (C, gcc only) and one trace file per simulated scenario.
fakenvml: $(STAMP)
	sh tests/fakenvml/build.sh $(FAKE)
	$(VPY) -m gpumon.sim.trace --all --out $(FAKE)/traces

test: $(DEV_STAMP) fakenvml
	$(VPY) -m pytest -q $(PYTEST_ARGS)

bench: $(DEV_STAMP) fakenvml
	$(VPY) -m bench.run

bench-detect: $(DEV_STAMP)
	$(VPY) -m bench.detect

bench-real: $(DEV_STAMP)
	$(VPY) -m bench.real

# The detector's functions: none over 50 lines or cyclomatic complexity 12 (radon).
lint: $(DEV_STAMP)
	$(VPY) -m bench.complexity

# For a machine with an NVIDIA GPU (no network needed: the script picks a Python with torch).
gpu-check:
	sh bench/gpu_check.sh

clean:
	rm -rf build $(VENV) *.egg-info
