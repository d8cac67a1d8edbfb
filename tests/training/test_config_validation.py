"""Config and data errors reach the user as one-line CLI errors, before anything is built.

Every ``model.*`` / ``data.*`` / ``optim.*`` / ``train.*`` field is checked by
``training/config.py`` (type, range, allowed choices, cross-field rules) when the config
is loaded, so a bad ``--set`` names its field and leaves no run folder behind; a dataset
root that is empty or has a split with no clips is refused by the task builder, before
training, with one line naming the split.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from click.testing import CliRunner
from fixtures_speech import tiny_root

from liquid_stream.cli import main
from liquid_stream.training.config import (
    OPTIM_FIELDS,
    TRAIN_FIELDS,
    ConfigError,
    OptimConfig,
    TrainConfig,
    config_path,
    load_config,
)
from liquid_stream.training.tasks import TASKS, data_defaults_for

# Small enough that a run which (wrongly) got past the checks ends in seconds.
SMALL = {
    "speech": [
        "model.d_model=8",
        "model.n_layers=1",
        "model.d_state=4",
        "optim.batch_size=2",
        "train.progress=false",
        "train.device=cpu",
        "data.subset=sc10",
    ],
}
SMALL["speech-stream"] = [
    *SMALL["speech"],
    "model.decoder_window=800",
    "data.length=6000",
    "data.n_train=4",
    "data.n_val=2",
    "data.n_test=2",
]


def _sets(task: str) -> list[str]:
    return [a for s in SMALL[task] for a in ("--set", s)]


def _train(tmp_path: Path, monkeypatch, *args: str):
    """``liquid-stream train ARGS`` run in an empty folder (so a default ``runs/`` would
    show); returns the result and the run folder it was told to use."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    out = work / "run"
    r = CliRunner().invoke(main, ["train", *args, "--out", str(out)])
    return r, out


def _assert_one_line_error(r, *needles: str) -> str:
    """Exit != 0 through click's error path (no exception escaped), the message on one
    line, naming what it should."""
    assert r.exit_code != 0, r.output
    assert isinstance(r.exception, SystemExit), (
        f"uncaught {type(r.exception).__name__}: {r.exception}"
    )
    assert "Traceback" not in r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _assert_nothing_written(tmp_path: Path, out: Path) -> None:
    assert not out.exists(), sorted(p.name for p in out.iterdir())
    assert not (out / "config.yaml").exists()
    assert list((tmp_path / "work").iterdir()) == []  # no runs/ either


# ------------------------------------------------------------------------ config fields


@pytest.mark.parametrize(
    "override, needles",
    [
        ("model.d_model=abc", ["model.d_model", "positive integer", "'abc'"]),
        ("model.d_model=-4", ["model.d_model", "positive integer", "-4"]),
        ("data.n_train=0", ["data.n_train", "positive integer", "got 0"]),
        ("model.liquid_order=1", ["model.liquid_order", "2..10", "got 1"]),
        ("model.liquid=xyz", ["model.liquid", "pb", "kb", "ltc", "'xyz'"]),
        ("model.d_state=1", ["model.d_state", ">= 2"]),
        ("model.mode=s4", ["model.mode", "dplr", "diag"]),
        ("model.dropout=1.5", ["model.dropout"]),
        ("model.decoder_window=0", ["model.decoder_window"]),
        ("model.dt_min=0.5", ["model.dt_min", "model.dt_max"]),
        ("model.liquid=ltc", ["model.liquid=ltc", "model.mode=diag"]),
        ("model.init=lin", ["model.init", "legs"]),
        ("model.prenorm=maybe", ["model.prenorm", "true or false"]),
        ("data.length=1.5", ["data.length"]),
        ("data.noise=-1", ["data.noise"]),
        ("optim.warmup_steps=-1", ["optim.warmup_steps"]),
        ("train.num_workers=two", ["train.num_workers"]),
        # unknown keys: a key the section does not have, and a sub-key of a plain field
        ("model.foo=1", ["unknown key model.foo"]),
        ("data.n_train.x=1", ["data.n_train", "no sub-keys"]),
    ],
)
def test_bad_field_is_a_one_line_error_and_writes_nothing(tmp_path, monkeypatch, override, needles):
    r, out = _train(
        tmp_path, monkeypatch, "toy", "--preset", "tiny", "--max-steps", "1", "--set", override
    )
    _assert_one_line_error(r, *needles)
    _assert_nothing_written(tmp_path, out)


@pytest.mark.slow
def test_bad_field_through_the_console_script(tmp_path):
    """The installed ``liquid-stream`` script: no traceback on stderr, nothing written."""
    script = Path(sys.executable).parent / "liquid-stream"
    out = tmp_path / "run"
    p = subprocess.run(
        [str(script), "train", "toy", "--out", str(out), "--set", "model.d_model=abc"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ},
    )
    assert p.returncode != 0
    assert "Traceback" not in p.stderr + p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert lines == ["Error: config: model.d_model must be a positive integer, got 'abc'"]
    assert not out.exists()


def test_values_are_normalised():
    cfg = load_config("toy", None, ["data.n_train=1e2", "model.liquid=none", "optim.epochs=2.0"])
    assert cfg["data"]["n_train"] == 100 and isinstance(cfg["data"]["n_train"], int)
    assert cfg["model"]["liquid"] is None
    assert cfg["optim"]["epochs"] == 2 and isinstance(cfg["optim"]["epochs"], int)


def test_task_data_rules():
    with pytest.raises(ConfigError, match=r"data\.gap_ms"):
        load_config("speech-stream", "cpu", ["data.gap_ms=[500, 100]"])
    with pytest.raises(ConfigError, match=r"data\.subset must be one of .*sc35"):
        load_config("speech", "cpu", ["data.subset=sc12"])
    with pytest.raises(ConfigError, match=r"data\.synth_per_word must be an integer >= 3"):
        load_config("speech", "cpu", ["data.synth_per_word=2"])
    with pytest.raises(ConfigError, match=r"data\.target must be one of"):
        load_config("bidmc", "cpu", ["data.target=bp"])
    with pytest.raises(ConfigError, match=r"data\.min_length \+ 1 must be < data\.max_length"):
        load_config("listops", "cpu", ["data.min_length=300", "data.max_length=300"])
    with pytest.raises(ConfigError, match=r"data\.val_fraction \+ data\.test_fraction"):
        load_config("pathfinder", "cpu", ["data.val_fraction=0.5", "data.test_fraction=0.5"])
    with pytest.raises(ConfigError, match=r"n_images=10 leaves the val split with 0"):
        load_config("pathfinder", "cpu", ["data.n_images=10", "data.val_fraction=0.01"])
    with pytest.raises(ConfigError, match=r"data\.val_fraction"):  # images: val would be empty
        load_config("fashion-mnist", "cpu", ["data.val_fraction=0"])
    load_config("imdb", "cpu", ["data.val_fraction=0"])  # imdb: 0 = validate on test (LRA)


def test_every_field_has_a_rule():
    """Each key a task builder accepts and each LiquidS4Model argument has a spec, and
    every task config file and preset passes validation."""
    import inspect

    from liquid_stream.nn.model import LiquidS4Model
    from liquid_stream.training.config import data_fields, model_fields

    for task in TASKS:
        defaults = data_defaults_for(task)
        assert set(data_fields(task, defaults)) == set(defaults), task
    params = set(inspect.signature(LiquidS4Model.__init__).parameters) - {
        "self",
        "d_input",
        "d_output",
    }
    assert params <= set(model_fields())
    for cls, specs in ((OptimConfig, OPTIM_FIELDS), (TrainConfig, TRAIN_FIELDS)):
        defaults = asdict(cls())  # each default is defined once, in the dataclass
        assert set(specs) == set(defaults), cls
        assert all(specs[k].coerce(v) == v for k, v in defaults.items()), cls
    for path in sorted(config_path("toy").parent.glob("*.yaml")):
        presets = yaml.safe_load(path.read_text()).get("presets") or {}
        for preset in [None, *presets]:
            load_config(path.stem, preset)


def test_allowed_choices_are_what_the_model_builds():
    """Each choice the config allows builds a model (the lists come from the model code)."""
    from liquid_stream.nn.model import LiquidS4Model
    from liquid_stream.training.config import model_fields

    fields = model_fields()
    for key in ("liquid", "decoder", "norm", "backend"):
        for value in fields[key].what.removeprefix("one of ").split(", "):
            value = None if value == "null (none)" else value
            extra = {"mode": "diag"} if value == "ltc" else {}
            LiquidS4Model(1, 2, d_model=4, n_layers=1, d_state=4, **{key: value, **extra})


# -------------------------------------------------------------------------- data errors


@pytest.mark.parametrize("task", ["speech", "speech-stream"])
def test_speech_empty_data_dir_is_a_one_line_error(tmp_path, monkeypatch, task):
    empty = tmp_path / "empty"
    empty.mkdir()
    r, out = _train(
        tmp_path, monkeypatch, task, "--preset", "cpu", "--data", str(empty), "--max-steps", "1"
    )
    _assert_one_line_error(r, "validation_list.txt", str(empty))
    _assert_nothing_written(tmp_path, out)


@pytest.mark.slow
def test_speech_stream_empty_dir_through_the_console_script(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    script = Path(sys.executable).parent / "liquid-stream"
    p = subprocess.run(
        [
            str(script),
            "train",
            "speech-stream",
            "--preset",
            "cpu",
            "--data",
            str(empty),
            "--out",
            str(tmp_path / "run"),
            "--max-steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ},
    )
    assert p.returncode != 0 and "Traceback" not in p.stderr + p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "validation_list.txt not found" in lines[0], p.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "task, needle",
    [
        ("bidmc", "neither"),
        ("listops", "basic_train.tsv"),
        ("fashion-mnist", "train-images-idx3-ubyte"),
        ("imdb", "aclImdb"),
        ("aan", "new_aan_pairs"),
        ("pathfinder", "no such difficulty folder"),
    ],
)
def test_other_tasks_empty_data_dir(tmp_path, monkeypatch, task, needle):
    empty = tmp_path / "empty"
    empty.mkdir()
    r, out = _train(
        tmp_path, monkeypatch, task, "--preset", "cpu", "--data", str(empty), "--max-steps", "1"
    )
    _assert_one_line_error(r, needle)
    _assert_nothing_written(tmp_path, out)


def _root_with_empty_lists(path: Path, *lists: str) -> Path:
    """The TTS-free sc10 fixture with the given split lists emptied (what ``liquid-stream
    data speech-synth --per-word 2`` writes for both of them)."""
    root = tiny_root(path)
    for name in lists:
        (root / name).write_text("")
    return root


@pytest.mark.parametrize("task", ["speech-stream", "speech"])
def test_empty_testing_split_is_refused_up_front(tmp_path, monkeypatch, task):
    root = _root_with_empty_lists(tmp_path / "sc", "testing_list.txt")
    r, out = _train(
        tmp_path,
        monkeypatch,
        task,
        "--preset",
        "cpu",
        "--data",
        str(root),
        "--max-steps",
        "2",
        *_sets(task),
    )
    line = _assert_one_line_error(r, "test split", "0 clips", "testing_list.txt", "at least 1")
    assert "sc10" in line
    _assert_nothing_written(tmp_path, out)


def test_per_word_2_set_is_refused_naming_the_val_split(tmp_path, monkeypatch):
    root = _root_with_empty_lists(tmp_path / "sc", "validation_list.txt", "testing_list.txt")
    r, out = _train(
        tmp_path,
        monkeypatch,
        "speech-stream",
        "--preset",
        "cpu",
        "--data",
        str(root),
        "--max-steps",
        "2",
        *_sets("speech-stream"),
    )
    _assert_one_line_error(r, "val split", "0 clips", "validation_list.txt")
    _assert_nothing_written(tmp_path, out)


def test_speech_stream_dataset_refuses_an_empty_split(tmp_path):
    from liquid_stream.training.data.speech.speech import SpeechStream

    root = _root_with_empty_lists(tmp_path / "sc", "testing_list.txt")
    with pytest.raises(ValueError, match=r"the test split has 0 clips of the sc10 words"):
        SpeechStream(root, "test", "sc10", length=4000, num_items=2)
    SpeechStream(root, "val", "sc10", length=4000, num_items=2)[0]  # a filled split works


def test_a_valid_run_still_writes_its_config(tmp_path, monkeypatch):
    r, out = _train(
        tmp_path,
        monkeypatch,
        "toy",
        "--preset",
        "tiny",
        "--max-steps",
        "1",
        "--set",
        "train.progress=false",
        "--device",
        "cpu",
    )
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((out / "config.yaml").read_text())["model"]["d_model"] == 16


# --------------------------------------------------------------------- speech-synth


def test_generator_warns_when_per_word_leaves_splits_empty():
    from liquid_stream.training.data.speech import speech_synth as ss

    with pytest.warns(ss.EmptySplitWarning, match=r"val and test splits will have no clips"):
        jobs, split_of = ss.plan_synth(2, words=("yes", "no"), seed=0)
    assert {split_of[j.voice.speaker_id] for j in jobs} == {"train"}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ss.EmptySplitWarning)
        jobs, split_of = ss.plan_synth(3, words=("yes", "no"), seed=0)
    assert {split_of[j.voice.speaker_id] for j in jobs} == {"train", "val", "test"}


def test_speech_synth_cli_warns_before_generating(tmp_path, monkeypatch):
    from liquid_stream.training.data.speech import speech_synth as ss

    def fake(out, per_word, **kw):  # no TTS: the report of a train-only set
        clips = {"train": 2 * per_word, "val": 0, "test": 0}
        return SimpleNamespace(
            n_clips=2 * per_word,
            root=str(out),
            seconds=0.1,
            clips=clips,
            clips_per_s=1.0,
            speakers=dict(clips),
            too_long=0,
            engines=["espeak-ng"],
        )

    monkeypatch.setattr(ss, "generate_speech_synth", fake)
    r = CliRunner().invoke(
        main, ["data", "speech-synth", str(tmp_path / "sc"), "--per-word", "2", "--words", "yes,no"]
    )
    assert r.exit_code == 0, r.output
    assert "warning: --per-word 2 is too small to fill every split" in r.output
    assert "val and test splits" in r.output
    r = CliRunner().invoke(
        main, ["data", "speech-synth", str(tmp_path / "sc"), "--per-word", "3", "--words", "yes,no"]
    )
    assert r.exit_code == 0 and "warning" not in r.output
