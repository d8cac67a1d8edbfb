# liquid-stream developer entry points.
#   make test   - create .venv if missing, install, ruff + pytest
#   make demo   - install, run the end-to-end demo (python -m liquid_stream.demo)
#   make bench  - install, run the kernel benchmark (bench/kernel.py)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is installed first, pinned: an unpinned resolve pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
STAMP  := $(VENV)/.installed-stamp
# Debian packages of the synthetic Speech Commands generator (training/data/speech_synth.py).
APT_PACKAGES := espeak-ng flite sox festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts
FESTIVAL_VOICES := /usr/share/festival/voices

# Project-local KeOps build cache (its default folder name embeds the hostname).
export KEOPS_CACHE_FOLDER := $(CURDIR)/.cache/keops

.PHONY: install test lint demo bench clean

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when pyproject.toml changes (or the venv is new).
$(STAMP): pyproject.toml | $(PY)
	@# Required: the synthetic Speech Commands generator needs espeak-ng, flite and festival
	@# with three voices (all Debian main). Installed only when missing (root or sudo).
	@command -v espeak-ng >/dev/null && command -v flite >/dev/null && command -v festival >/dev/null \
		&& test -d $(FESTIVAL_VOICES)/english/kal_diphone && test -d $(FESTIVAL_VOICES)/english/ked_diphone \
		&& test -d $(FESTIVAL_VOICES)/us/cmu_us_slt_arctic_hts \
		|| { if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		     $$SUDO apt-get update -qq \
		     && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
		        $(APT_PACKAGES); }
	$(PIP) install '$(TORCH_PIN)'
	$(PIP) install -e '.[dev]'
	@# Best effort: pykeops needs g++ at run time and may fail to install/build.
	@$(PIP) install -e '.[keops]' \
		|| echo "NOTE: optional keops extra (pykeops) failed to install; the KeOps Cauchy backend will be skipped."
	@mkdir -p $(KEOPS_CACHE_FOLDER)
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest -q

demo: $(STAMP)
	$(PY) -m liquid_stream.demo

bench: $(STAMP)
	$(PY) bench/kernel.py

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
