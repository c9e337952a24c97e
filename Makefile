# xformer: `make run` trains the default model, `make test` runs the test suite, `make lint` runs ruff.
# Both create .venv on first use: torch first (CPU wheel by default; TORCH_SPEC="torch==X --index-url ..."
# for a CUDA build), then the project with its dev extras.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-slow test-cluster lint install bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e ".[dev,bench]"
	touch $(STAMP)

install: $(STAMP)

# one thread unless OMP_NUM_THREADS is set: torch's one-per-core default is many times slower on a
# busy machine for models this size (README)
run: $(STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(BIN)/python run.py $(ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -n 0  # one process: the slow set was validated serially

# the tests on a real localhost SLURM cluster (scripts/slurm-localhost.sh; root, else they skip); in the slow set
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -q -m cluster

bench: $(STAMP)
	$(BIN)/xformer bench $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache
