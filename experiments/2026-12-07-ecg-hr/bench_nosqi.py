"""bench/vitals_stream.py with the monitor's signal-quality check off (judge -> None), so a
PPG+ECG model fed a flat PLETH (--flat PLETH) still emits numbers (b602c60 blanks them)."""

import runpy
import sys

import liquid_stream.apps.vitals.monitor as vm

vm.judge = lambda *a, **k: None
sys.argv = ["bench/vitals_stream.py", *sys.argv[1:]]
runpy.run_path("bench/vitals_stream.py", run_name="__main__")
