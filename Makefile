# nmt-cli: make install | test | test-fast | demo | distill-demo | config-doc | recipes | recipe NAME=... (or make NAME) | domain-adaptation | recipes-check | bench
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
# The torch pin, installed before the project. PyPI's Linux wheel brings the CUDA libraries;
# TORCH_INDEX=https://download.pytorch.org/whl/cpu installs the CPU build instead (CI machines
# get it from their own wheel folder). On a GPU machine: make install TORCH_SPEC="torch>=2.2"
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
BIN := $(VENV)/bin
# every recipes/NAME.yaml is also a target of its own: make multi30k-transformer
RECIPE_NAMES := $(filter-out demo,$(basename $(notdir $(wildcard recipes/*.yaml))))
# domain adaptation (recipes/adaptation/NAME.yaml): make adapt-ted, make adapt-news, make domain-adaptation
ADAPTATION_NAMES := $(addprefix adapt-,$(basename $(notdir $(wildcard recipes/adaptation/*.yaml))))

.PHONY: install test test-fast config-doc demo distill-demo recipes recipe recipes-check bench clean domain-adaptation $(RECIPE_NAMES) $(ADAPTATION_NAMES)

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH_SPEC)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

# the suite runs in TEST_WORKERS pytest-xdist processes, a file's tests in one of them
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# the quick loop: every test but those marked slow (training in subprocesses, recipes, benchmarks,
# the guides' runnable blocks); make test runs them all, and CI runs make test
test-fast: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not slow'

# docs/config.md, the config reference, written from the config classes (tests/test_docs.py checks it)
config-doc: install
	$(BIN)/python -m nmt_cli.config_reference docs/config.md

demo: install
	$(BIN)/python recipes/run_recipe.py demo

# the whole distillation pipeline on the synthetic corpus (docs/distilling.md): a small teacher,
# its translations, a student, their BLEU side by side; rerun it to see every stage skipped
distill-demo: install
	$(BIN)/nmt distill --check --out work/distill-demo

recipes: install
	$(BIN)/python recipes/run_recipe.py --list

recipe: install
	$(BIN)/python recipes/run_recipe.py $(NAME)

$(RECIPE_NAMES): install
	$(BIN)/python recipes/run_recipe.py $@

$(ADAPTATION_NAMES): adapt-%: install
	$(BIN)/python recipes/run_adaptation.py $*

domain-adaptation: $(ADAPTATION_NAMES)
	$(BIN)/python recipes/run_adaptation.py --table

recipes-check: install
	$(BIN)/python -m pytest -q tests/test_recipes.py

bench: install
	$(BIN)/python bench/run_all.py

clean:
	rm -rf results work build *.egg-info
