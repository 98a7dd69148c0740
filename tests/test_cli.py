"""The ``hmoe-estim`` command and study configs: validation, errors, SIGKILL + resume."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import tomllib

import numpy as np
import pytest

from hmoe_estim.study import ConfigError, StudyConfig, load_config, load_preset, main, read_results

TINY_TOML = """
name = "tiny"
seed = 3
models = ["none", "value", "sdpa"]
[truth]
n_features = 2
seed = 1
[grid]
n = [40, 80]
reps = 2
[fit]
n_starts = 1
max_iter = 15
[metrics]
n_ref = 300
"""


def write(tmp_path, text, name="study.toml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def run_cli(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- config validation ---------------------------------------------------------------------
def test_presets_follow_spec_section_6():
    for name in ("quick", "full"):
        cfg = load_preset(name)
        assert cfg.true_shape == (1, 2, 2, 3)  # H*, N*, K*, D
        assert cfg.fit.n_experts == 3 and cfg.specification == "over-specified"
        expected = ["none", "value", "sdpa"] + (["output"] if name == "full" else [])
        assert [m.gate for m in cfg.models] == expected  # full: G5 too, for comparison
        assert {m.activation for m in cfg.models} == {"sigmoid"}
        assert cfg.data.noise == 0.1 and cfg.data.box == 1.0 and cfg.truth.scale == 2.0
        assert cfg.fit.init == "random" and not cfg.oracle  # honest default
        assert cfg.grid.n[0] >= 1000
    full = load_preset("full")
    assert full.grid.reps >= 20 and full.grid.n[0] == 1000 and full.grid.n[-1] == 100000


def test_preset_command_prints_the_preset(capsys):
    code, out, _ = run_cli(["preset", "quick"], capsys)
    assert code == 0
    assert StudyConfig.from_dict(tomllib.loads(out)) == load_preset("quick")


def test_config_roundtrip_and_hash(tmp_path):
    cfg = load_config(write(tmp_path, TINY_TOML))
    again = StudyConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.config_hash() == cfg.config_hash()
    assert cfg.with_changes(fit={"n_starts": 2}).config_hash() != cfg.config_hash()
    assert cfg.fit.n_experts == 3  # K* + 1 by default
    assert [m.name for m in cfg.models] == ["none", "value", "sdpa"]


def test_log_grid_and_models_as_tables():
    cfg = StudyConfig.from_dict({
        "models": [{"gate": "value", "activation": "tanh"}, {"gate": "value"}],
        "grid": {"n_min": 1000, "n_max": 100000, "n_points": 5},
    })
    assert cfg.grid.n == (1000, 3162, 10000, 31623, 100000)
    assert [m.name for m in cfg.models] == ["value-tanh", "value-sigmoid"]


def test_explicit_truth_measure(tmp_path):
    M = np.zeros((1, 2, 2, 2))
    M[0, 0] = [[1.0, 0.5], [0.5, -1.0]]
    measure = {"omega": [[1.0, 0.5]], "M": M.tolist(),
               "a": np.arange(8.0).reshape(1, 2, 2, 2).tolist()}
    (tmp_path / "truth.json").write_text(json.dumps(measure))
    cfg = load_config(write(tmp_path, 'models = ["none"]\n[truth]\nfile = "truth.json"\n'))
    assert cfg.true_shape == (1, 2, 2, 2) and cfg.truth.measure["a"] == measure["a"]


@pytest.mark.parametrize(
    "text, match",
    [
        ('models = ["none"]\ncolour = 1\n', "unknown key 'colour' in the config's top level"),
        ('models = ["none"]\n[fit]\nn_start = 3\n', "unknown key 'n_start' in \\[fit\\]"),
        ('models = ["none"]\n[grid]\nreps = 0\n', "grid.reps must be >= 1"),
        ('models = ["none"]\n[grid]\nn = [5]\n', "grid.n\\[0\\] must be >= 10"),
        ('models = ["none"]\n[grid]\nn = [20]\n', "below the 27 free parameters"),
        ('models = ["none"]\n[truth]\nn_tokens = 1\n', "truth.n_tokens must be >= 2"),
        ('models = ["none"]\n[truth]\nn_heads = 1.5\n', "truth.n_heads must be an integer"),
        ('models = ["none"]\n[data]\nnoise = -1\n', "data.noise must be >= 0"),
        ('models = ["attention"]\n', "models\\[0\\].gate must be one of"),
        ('models = ["none", "none"]\n', "model names must be unique"),
        ("name = 'x'\n", "no 'models'"),
        ('models = ["none"]\n[fit]\ninit = "oracle"\n', "fit.init must be one of"),
        ('models = ["none"]\n[grid]\nn = [100]\nn_min = 10\n', "both 'n' and a log grid"),
        ('models = ["none"]\n[truth]\nscale = 20.0\n', "exceeds fit.param_bound"),
        ('models = ["none"\n', "TOML syntax error"),
    ],
)
def test_config_errors(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, text))


def test_under_specified_is_allowed_but_flagged():
    cfg = StudyConfig.from_dict({"models": ["none"], "fit": {"n_experts": 1}})
    assert cfg.specification == "under-specified"
    assert any("under-specified" in w for w in cfg.warnings())


# -- command-line errors: message, exit 2, no traceback ---------------------------------------
def test_cli_unknown_key(tmp_path, capsys):
    p = write(tmp_path, 'models = ["none"]\nfoo = 1\n')
    code, _, err = run_cli(["study", p, "--out", tmp_path / "o"], capsys)
    assert code == 2 and "unknown key 'foo'" in err and "Traceback" not in err


def test_cli_missing_config(tmp_path, capsys):
    code, _, err = run_cli(["study", tmp_path / "nope.toml"], capsys)
    assert code == 2 and "does not exist" in err


def test_cli_out_is_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("")
    code, _, err = run_cli(["study", write(tmp_path, TINY_TOML), "--out", tmp_path / "f"], capsys)
    assert code == 2 and "is a file" in err


def test_cli_bad_n_jobs(tmp_path, capsys):
    code, _, err = run_cli(["study", write(tmp_path, TINY_TOML), "--out", tmp_path / "o",
                            "--n-jobs", "0"], capsys)
    assert code == 2 and "--n-jobs" in err


def test_cli_rates_of_missing_out(tmp_path, capsys):
    code, _, err = run_cli(["rates", tmp_path / "none"], capsys)
    assert code == 2 and "does not exist" in err


def test_cli_unreachable_scheduler(tmp_path, capsys):
    pytest.importorskip("dask.distributed")
    code, _, err = run_cli(["study", write(tmp_path, TINY_TOML), "--out", tmp_path / "o",
                            "--dask-scheduler", "tcp://127.0.0.1:9", "--dask-timeout", "1"],
                           capsys)
    assert code == 2 and "cannot reach the Dask scheduler" in err and "Traceback" not in err


def test_cli_study_rates_plot_and_corrupt_line(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    toml = write(tmp_path, TINY_TOML)
    out = tmp_path / "out"
    code, stdout, err = run_cli(["study", toml, "--out", out, "--n-jobs", "1"], capsys)
    assert code == 0, err
    assert "slope b" in stdout and "regression_error" in stdout
    assert (out / "rates.json").exists() and (out / "learning_curves.png").exists()
    assert "[" in err and "12/12 fits" in err  # progress bar
    # resume from the stored config.json, nothing to do
    code, _, err = run_cli(["study", out / "config.json", "--out", out, "--no-plot"], capsys)
    assert code == 0 and "12 of 12 fits already" in err
    # a different config into the same OUT
    code, _, err = run_cli(["study", write(tmp_path, TINY_TOML.replace("reps = 2", "reps = 3"),
                                           "other.toml"), "--out", out], capsys)
    assert code == 2 and "different configuration" in err and "grid.reps: 2 -> 3" in err
    code, stdout, _ = run_cli(["rates", out, "--n-boot", "100"], capsys)
    assert code == 0 and "voronoi_loss" in stdout
    os.remove(out / "learning_curves.png")
    code, stdout, _ = run_cli(["plot", out], capsys)
    assert code == 0 and (out / "learning_curves.png").stat().st_size > 1000
    with open(out / "results.jsonl", "ab") as fh:
        fh.write(b"not json\n")
    for argv in (["rates", out], ["study", toml, "--out", out]):
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and "line 13: corrupt line" in err and "Traceback" not in err


def test_python_dash_m(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hmoe_estim", "rates", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "hmoe-estim: error:" in res.stderr


# -- SIGKILL in the middle of a study, then resume ------------------------------------------
KILL_TOML = """
name = "kill"
seed = 11
models = ["none", "value", "sdpa"]
[truth]
n_features = 2
seed = 1
[grid]
n = [400, 800]
reps = 5
[fit]
n_starts = 2
max_iter = 150
[metrics]
n_ref = 300
"""


def _count_lines(path):
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigkill_then_resume_every_fit_exactly_once(tmp_path):
    toml = write(tmp_path, KILL_TOML)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    cmd = [sys.executable, "-m", "hmoe_estim", "study", str(toml), "--out", str(out),
           "--n-jobs", "2", "--no-plot", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.time() + 120
    while _count_lines(results) < 2 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the CLI and its worker processes
    proc.wait(timeout=30)
    proc.stderr.close()
    n_before = _count_lines(results)
    assert 2 <= n_before < 30, "the study was not interrupted mid-way; enlarge KILL_TOML"
    lines_before = results.read_bytes()

    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    records, partial = read_results(results)
    assert partial is None
    keys = [(r["model"], r["n"], r["rep"]) for r in records]
    expected = {(m, n, r) for m in ("none", "value", "sdpa") for n in (400, 800) for r in range(5)}
    assert len(keys) == len(set(keys)) == 30 and set(keys) == expected
    # the lines written before the kill are still there, unchanged, at the start
    assert results.read_bytes().startswith(lines_before[: lines_before.rfind(b"\n") + 1])
