"""Hardening: no silent wrong result, no traceback, no hang, no foreign data in a study.

One test per case of the fault campaign: each bad input or fault ends in correct behaviour or
in a clear error (``ValueError`` / exit status 2 with one line naming the input and the fix).
"""

import fcntl
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LinearRegression

from hmoe_estim import (
    HMoERegressor,
    MixingMeasure,
    make_hmoe_regression,
    make_voronoi_scorer,
    regression_function,
)
from hmoe_estim.attention import multihead_attention
from hmoe_estim.study import (
    ConfigError,
    ResultsError,
    StudyConfig,
    StudyError,
    load_config,
    load_study,
    main,
    prepare_out,
    run_study,
)

from .test_cli import TINY_TOML
from .test_study import TINY

# the runner and CLI tests' tiny study, with one model
SMALL = {**json.loads(json.dumps(TINY)), "name": "small", "models": ["none"]}
SMALL_TOML = TINY_TOML.replace('name = "tiny"', 'name = "small"').replace(
    'models = ["none", "value", "sdpa"]', 'models = ["none"]')


def small(**changes):
    d = json.loads(json.dumps(SMALL))
    for section, values in changes.items():
        if isinstance(values, dict):
            d.setdefault(section, {}).update(values)
        else:
            d[section] = values
    return StudyConfig.from_dict(d)


def run(config, out, **kw):
    kw.setdefault("n_jobs", 1)
    return run_study(config, str(out), progress=False, stream=io.StringIO(), **kw)


def run_cli(argv, capsys):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code, err):
    """Exit status 2, one ``error:`` line, no traceback."""
    errors = [ln for ln in err.splitlines() if ln.startswith("hmoe-estim: error:")]
    return code == 2 and len(errors) == 1 and "Traceback" not in err


@pytest.fixture(scope="module")
def done_study(tmp_path_factory):
    """A finished 4-fit study (one model, two sizes, two replications)."""
    out = tmp_path_factory.mktemp("study") / "out"
    run(small(), out)
    return out


def copy_study(done_study, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(done_study, out)
    return out


@pytest.fixture(scope="module")
def value_data():
    return make_hmoe_regression(300, n_features=2, gate="value", random_state=0)


def r2(est, X, y):
    return est.score(X, y)


def fit_value(X, y, **kw):
    kw = {"gate": "value", "n_starts": 2, "random_state": 0, **kw}
    return HMoERegressor(**kw).fit(X, y)


# == A. study integrity =====================================================================
def test_record_of_another_config_is_refused_with_its_line(done_study, tmp_path):
    out = copy_study(done_study, tmp_path)
    path = out / "results.jsonl"
    lines = path.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["seed"] += 1  # same (model, n, rep), another config's seed
    lines[1] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsError, match=r"line 2: .*seed"):
        load_study(str(out))
    with pytest.raises(ResultsError, match="line 2"):
        run(small(), out)


def test_record_with_a_string_n_is_one_line_error(done_study, tmp_path, capsys):
    out = copy_study(done_study, tmp_path)
    path = out / "results.jsonl"
    rec = json.loads(path.read_text().splitlines()[0])
    rec["n"] = "abc"
    with open(path, "a") as fh:
        fh.write(json.dumps(rec) + "\n")
    code, _, err = run_cli(["rates", out], capsys)
    assert one_line_error(code, err) and "line 5" in err and "'n'" in err


def test_config_is_written_only_under_the_lock(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(StudyError, match="another hmoe-estim run"):
            run(small(), out)
        assert not (out / "config.json").exists()
    finally:
        os.close(fd)


def test_two_configs_started_at_once_never_mix(tmp_path):
    def start(j, out, configs, barrier, outcome):
        barrier.wait()
        try:
            run(configs[j], out, max_fits=0)
            outcome[j] = "ok"
        except StudyError as exc:
            outcome[j] = str(exc)

    for trial in range(4):
        out = tmp_path / f"out{trial}"
        configs = [small(seed=10 + trial), small(seed=20 + trial)]
        barrier = threading.Barrier(2)
        outcome = [None, None]
        threads = [threading.Thread(target=start, args=(j, out, configs, barrier, outcome))
                   for j in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = json.loads((out / "config.json").read_text())["config_hash"]
        winners = [j for j in range(2) if outcome[j] == "ok"]
        assert len(winners) >= 1
        for j in winners:  # whoever ran, ran the config stored in OUT
            assert configs[j].config_hash() == stored


def _children(pid):
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(d))
    return kids


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_local_workers_die_with_a_killed_study(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL_TOML.replace("n = [40, 80]", "n = [3000, 6000]")
                   .replace("max_iter = 15", "max_iter = 2000").replace("reps = 2", "reps = 4"))
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    proc = subprocess.Popen(
        [sys.executable, "-m", "hmoe_estim", "study", cfg, "--out", tmp_path / "out",
         "--n-jobs", "2", "--no-progress"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kids = []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(kids) < 2:
            time.sleep(0.2)
            kids = _children(proc.pid)
        assert len(kids) >= 2, "the study did not start its workers"
        time.sleep(1.0)
        kids = _children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 10
        while time.time() < deadline and any(_alive(k) for k in kids):
            time.sleep(0.2)
        assert not [k for k in kids if _alive(k)]
    finally:
        for k in kids:  # never leave them behind, whatever happened
            if _alive(k):
                os.kill(k, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_name_cannot_steer_the_default_out_outside(tmp_path, monkeypatch, capsys):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    cfg = work / "s.toml"
    cfg.write_text(SMALL_TOML.replace('name = "small"', 'name = "x/../../../escape"'))
    monkeypatch.chdir(work)
    code, _, _ = run_cli(["study", cfg, "--max-fits", "0", "--n-jobs", "1", "--no-progress"],
                         capsys)
    assert code == 0
    assert not (tmp_path / "escape").exists()
    made = [p for p in os.listdir(work) if p != "s.toml"]
    assert len(made) == 1 and (work / made[0] / "config.json").exists()


def test_refusal_hint_resumes_the_stored_study(done_study, tmp_path, monkeypatch, capsys):
    out = copy_study(done_study, tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudyError) as info:
        run(small(seed=99), out)
    cmd = re.search(r"`hmoe-estim (study [^`]+)`", str(info.value)).group(1).split()
    code, _, err = run_cli([*cmd, "--n-jobs", "1", "--no-progress", "--no-plot"], capsys)
    assert code == 0 and "4 fits run" not in err and "0 fits run, 4 already done" in err


def test_stored_config_json_resumes_its_own_folder(done_study, tmp_path, monkeypatch, capsys):
    out = copy_study(done_study, tmp_path)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["study", out / "config.json", "--n-jobs", "1", "--no-progress",
                            "--no-plot"], capsys)
    assert code == 0 and "0 fits run, 4 already done" in err
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_plot_output_folder_gets_learning_curves_png(done_study, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    target = tmp_path / "figs"
    target.mkdir()
    code, out, _ = run_cli(["plot", done_study, "--output", target], capsys)
    png = target / "learning_curves.png"
    assert code == 0 and png.exists() and str(png) in out
    assert not (tmp_path / "figs.png").exists()


def test_plot_output_in_missing_folder_is_one_line(done_study, tmp_path, capsys):
    code, _, err = run_cli(["plot", done_study, "--output", tmp_path / "missing" / "x.png"],
                           capsys)
    assert one_line_error(code, err) and "does not exist" in err


def test_negative_max_fits_is_refused(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL_TOML)
    code, _, err = run_cli(["study", cfg, "--out", tmp_path / "out", "--max-fits", "-1"],
                           capsys)
    assert one_line_error(code, err) and "--max-fits must be >= 0" in err
    assert not (tmp_path / "out").exists()


def test_huge_study_refused_before_planning():
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"200000000 fits; at most"):
        small(grid={"n": [40, 80], "reps": 100_000_000})
    assert time.perf_counter() - t0 < 5


def _big_file(path, size=17 * 2**20):
    with open(path, "wb") as fh:  # sparse: no disk used, reads as NUL bytes
        fh.truncate(size)
    return path


def test_oversized_config_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        load_config(_big_file(tmp_path / "big.toml"))


def test_oversized_truth_file_is_refused(tmp_path):
    _big_file(tmp_path / "truth.json")
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL_TOML.replace("[truth]\nn_features = 2\nseed = 1",
                                      '[truth]\nfile = "truth.json"'))
    with pytest.raises(ConfigError, match="truth.file .*larger than 16 MiB"):
        load_config(cfg)


def test_non_utf8_toml_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_bytes(SMALL_TOML.replace("small", "sm\xe4ll").encode("latin-1"))
    code, _, err = run_cli(["study", cfg, "--out", tmp_path / "out"], capsys)
    assert one_line_error(code, err) and "not UTF-8" in err


@pytest.mark.parametrize("line", ["truth = 3", "grid = 3", "truth = [1]"])
def test_section_that_is_not_a_table_is_one_line(tmp_path, capsys, line):
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'models = ["none"]\n{line}\n')
    code, _, err = run_cli(["study", cfg, "--out", tmp_path / "out"], capsys)
    assert one_line_error(code, err) and "must be a table" in err


def test_corrupt_truth_json_is_a_study_error(tmp_path):
    cfg = small()
    prepare_out(str(tmp_path), cfg)
    (tmp_path / "truth.json").write_text('{"measure": {"omega": [[1.0')
    with pytest.raises(StudyError, match="truth.json is unreadable.*delete it"):
        prepare_out(str(tmp_path), cfg)


def test_incomplete_truth_json_is_a_study_error(tmp_path):
    cfg = small()
    prepare_out(str(tmp_path), cfg)
    (tmp_path / "truth.json").write_text('{"shape": {"H": 1}}\n')
    with pytest.raises(StudyError, match="truth.json does not hold a measure"):
        prepare_out(str(tmp_path), cfg)


def test_unwritable_out_is_one_line(tmp_path, capsys, monkeypatch):
    from hmoe_estim.study import _store

    def denied(path, obj):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(_store, "_write_json_atomic", denied)
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL_TOML)
    code, _, err = run_cli(["study", cfg, "--out", tmp_path / "out", "--n-jobs", "1"], capsys)
    assert one_line_error(code, err) and "Permission denied" in err and "--out" in err


def test_full_disk_is_one_line_and_loses_no_fit(tmp_path, capsys, monkeypatch):
    from hmoe_estim.study import _results

    real = _results.ResultsWriter.append
    calls = []

    def append(self, record):
        if self.path.endswith("results.jsonl") and len(calls) == 2:
            raise OSError(28, "No space left on device", self.path)
        calls.append(1)
        return real(self, record)

    monkeypatch.setattr(_results.ResultsWriter, "append", append)
    cfg = tmp_path / "s.toml"
    cfg.write_text(SMALL_TOML)
    argv = ["study", cfg, "--out", tmp_path / "out", "--n-jobs", "1", "--no-progress",
            "--no-plot"]
    code, _, err = run_cli(argv, capsys)
    assert one_line_error(code, err) and "No space left" in err and "rerun" in err
    monkeypatch.setattr(_results.ResultsWriter, "append", real)
    code, _, err = run_cli(argv, capsys)
    assert code == 0 and "2 fits run, 2 already done" in err


# == B. estimator and model inputs ==========================================================
def test_y_with_none_names_y(value_data):
    X, y = value_data
    y = y.astype(object)
    y[3] = None
    with pytest.raises(ValueError, match="y contains 1 missing value"):
        fit_value(X, y, n_starts=1, max_iter=5)


def test_string_y_is_a_value_error(value_data):
    X, y = value_data
    with pytest.raises(ValueError, match="y must be numeric"):
        fit_value(X, y.astype(str), n_starts=1, max_iter=5)


def test_huge_y_names_y_not_x(value_data):
    X, y = value_data
    with pytest.raises(ValueError, match="target y is too large") as info:
        fit_value(X, y * 1e300, n_starts=1, max_iter=20)
    assert "Rescale X" not in str(info.value)


def test_init_not_a_measure_is_a_clear_error(value_data):
    X, y = value_data
    with pytest.raises(ValueError, match="init must be .* got int 3"):
        fit_value(X, y, init=3)


def test_large_x_is_fitted_like_unit_x(value_data):
    X, y = value_data
    base = r2(fit_value(X, y), X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = fit_value(X * 1e8, y)
    assert abs(r2(est, X * 1e8, y) - base) < 0.01


def test_scorer_on_another_estimator_names_it():
    G = MixingMeasure(np.ones((1, 2)), np.zeros((1, 2, 2, 2)), np.ones((1, 2, 2, 2)))
    lr = LinearRegression().fit(np.eye(3)[:, :2], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="needs an HMoERegressor.*got LinearRegression"):
        make_voronoi_scorer(G)(lr, None, None)


def _G():
    return MixingMeasure(np.ones((1, 2)), np.zeros((1, 3, 2, 2)), np.ones((1, 3, 2, 2)))


def test_from_dict_names_the_missing_key():
    d = _G().to_dict()
    del d["a"]
    with pytest.raises(ValueError, match=r"missing \['a'\]"):
        MixingMeasure.from_dict(d)


def test_permuted_tokens_of_wrong_length():
    with pytest.raises(ValueError, match="tokens must be a permutation of range"):
        _G().permuted(tokens=[1])


def test_permuted_duplicate_channels():
    with pytest.raises(ValueError, match=r"channels must be a permutation .*\[0, 0\]"):
        _G().permuted(channels=[0, 0])


def test_permuted_out_of_range():
    with pytest.raises(ValueError, match="heads must be a permutation"):
        _G().permuted(heads=[3])


def test_complex_x_in_regression_function():
    with pytest.raises(ValueError, match="X must be real"):
        regression_function(_G(), np.ones((2, 2)) * (1 + 2j))


def test_complex_omega_in_measure():
    with pytest.raises(ValueError, match="omega must be real"):
        MixingMeasure(np.array([[1 + 1j, 1.0]]), np.zeros((1, 3, 2, 2)), np.ones((1, 3, 2, 2)))


def test_symmetrising_huge_entries_stays_finite():
    G = MixingMeasure([[1.0]], np.full((1, 2, 2, 2), 1e308), np.ones((1, 2, 1, 2)))
    assert np.all(np.isfinite(G.M)) and np.all(np.isfinite(G.normalized().M))


def test_overflowing_gauge_is_refused_at_construction():
    M = np.zeros((1, 2, 1, 1))
    M[0, 0], M[0, 1] = 1e308, -1e308
    with pytest.raises(ValueError, match="overflow"):
        MixingMeasure([[1.0]], M, np.ones((1, 2, 1, 1)))


def test_attention_overflow_is_an_error():
    rng = np.random.default_rng(0)
    W_Q, W_K, W_V = rng.normal(size=(3, 2, 4, 3))
    W_O = rng.normal(size=(2, 3, 4))
    with pytest.raises(ValueError, match="overflow .*rescale X"):
        multihead_attention(rng.normal(size=(5, 4)) * 1e160, W_Q, W_K, W_V, W_O)


@pytest.mark.parametrize("param", ["n_heads", "n_tokens"])
def test_oversized_model_refused_before_allocating(value_data, param):
    X, y = value_data
    with pytest.raises(ValueError, match=r"would need about [\d.]+ GiB \(limit 4 GiB\)"):
        fit_value(X, y, **{param: 10**6})


def test_tiny_target_scale_gives_the_same_r2(value_data):
    X, y = value_data
    base = r2(fit_value(X, y), X, y)
    assert abs(r2(fit_value(X, 1e-8 * y), X, 1e-8 * y) - base) < 0.01


@pytest.mark.parametrize("c", [1e3, 1e8])
def test_large_target_scale_warns_or_fits(value_data, c):
    X, y = value_data
    base = r2(fit_value(X, y), X, y)
    with pytest.warns(UserWarning, match="omega reach omega_max = 10.*Raise omega_max"):
        fit_value(X, c * y)
    # with the box widened by the same factor the fit is the unit-scale one
    assert abs(r2(fit_value(X, c * y, omega_max=10 * c), X, c * y) - base) < 0.01


@pytest.mark.parametrize("gate", ["value", "none"])
def test_offset_target_warns_about_the_intercept(gate):
    X, y = make_hmoe_regression(300, n_features=2, gate=gate, random_state=0)
    with pytest.warns(UserWarning, match=r"offset dominates.*fit_intercept=True"):
        fit_value(X, y + 1e8, gate=gate)
