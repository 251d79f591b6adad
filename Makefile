# Two entry points: `make demo` and `make test`. Both create .venv when missing and install the
# project into it; the install is skipped when pyproject.toml has not changed since the last one.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export BM25AUG_DATA_DIR ?= $(abspath ../shared/data)
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test test-slow install bench reproduce clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test,bench,serve]'
	touch $(STAMP)

install: $(STAMP)

# Two workers, one per core, each module on one worker (its fixtures, a cluster's too, start once).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -ra -n $(TEST_WORKERS) --dist loadfile -m "not slow" tests

# The tests marked slow: bge-small-en-v1.5's published SciFact nDCG@10 through eval.py (the first run
# on a machine encodes the corpus: 23 min on 2 cores; cached per corpus and model after).
test-slow: $(STAMP)
	$(PY) -m pytest -q -ra -m slow tests

# --resume makes a second `make demo` reuse the finished model instead of training again.
demo: $(STAMP)
	$(PY) train.py --dataset scifact --output-dir checkpoints/scifact --resume
	$(PY) eval.py --dataset scifact --method augmented --checkpoint checkpoints/scifact

bench: $(STAMP)
	$(PY) train.py --dataset scifact --output-dir checkpoints/scifact --resume
	$(PY) benchmarks/bench_search.py --dataset scifact --checkpoint checkpoints/scifact

# Every condition of bm25aug/reproduce/reproductions.yaml (trains what it needs); `--fast` runs in `make test`.
reproduce: $(STAMP)
	$(PY) -m bm25aug.reproduce

clean:
	rm -rf $(VENV) indexes/*/ checkpoints runs
