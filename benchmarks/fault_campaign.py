"""Fault campaign: bad inputs and faults tried as a new user would, outcomes counted.

Every case ends in one of

- ``correct``  — the right result (or a warning that names the fix, where the box of (A.1)
  makes the right result unreachable);
- ``clear``    — a ``ValueError`` (or ``ConfigError`` / ``StudyError`` / ``ResultsError``), or
  for the command line exit status 2 with one ``error:`` line, naming the input;
- ``silent``   — a wrong result without an error or warning;
- ``traceback``— another exception, or a command-line traceback;
- ``hang``     — no answer within the time limit (60 s; 120 s for the command line).

A SIGKILL of a running study (``--n-jobs 2``) followed by a resume checks that no finished fit
is lost and that no worker outlives its parent.

Run from the repository root::

    python benchmarks/fault_campaign.py            # prints one line per case and the counts
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from hmoe_estim import (  # noqa: E402 (after the sys.path line)
    HMoERegressor,
    MixingMeasure,
    make_hmoe_regression,
    make_voronoi_scorer,
    regression_function,
)
from hmoe_estim.attention import multihead_attention  # noqa: E402

CLEAR = (ValueError,)
TIMEOUT = 60
CLI_TIMEOUT = 120

SMALL_TOML = """
name = "small"
seed = 3
models = ["none"]
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

results = []


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def case(name, fn, *, expect_error=True, check=None):
    """Run ``fn``; classify. ``check(result, warnings)`` -> True when the result is correct."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            res = fn()
        signal.alarm(0)
        ok = check(res, [str(x.message) for x in w]) if check else not expect_error
        outcome = "correct" if ok else "silent"
    except _Timeout:
        outcome = "hang"
    except CLEAR:
        signal.alarm(0)
        outcome = "clear"
    except Exception as exc:  # noqa: BLE001
        signal.alarm(0)
        outcome = f"traceback ({type(exc).__name__})"
    results.append((name, outcome))
    print(f"{outcome:24s} {name}", flush=True)


def cli(name, argv, *, cwd, expect=2, check=None):
    """Run the command line; classify; return its stderr."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    try:
        p = subprocess.run([sys.executable, "-m", "hmoe_estim", *map(str, argv)], cwd=cwd,
                           env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        outcome, stderr = "hang", ""
    else:
        stderr = p.stderr
        errors = [ln for ln in p.stderr.splitlines() if ln.startswith("hmoe-estim: error:")]
        if "Traceback" in p.stderr:
            outcome = "traceback"
        elif p.returncode == expect == 2:
            outcome = "clear" if len(errors) == 1 else "traceback"
        elif p.returncode == expect:
            outcome = "correct" if (check is None or check(p)) else "silent"
        else:
            outcome = "silent"
    results.append((name, outcome))
    print(f"{outcome:24s} {name}", flush=True)
    return stderr


def estimator_cases():
    X, y = make_hmoe_regression(1000, n_features=2, gate="value", random_state=0)

    def fit(Xf, yf, **kw):
        params = {"gate": "value", "n_starts": 2, "random_state": 0, **kw}
        return HMoERegressor(**params).fit(Xf, yf)

    base = fit(X, y).score(X, y)
    for c in (1e-8, 1e-3, 1e3, 1e8):
        case(f"fit(X, {c:g} * y): same R² or a warning naming the fix",
             lambda c=c: fit(X, c * y).score(X, c * y),
             check=lambda r, w: abs(r - base) < 0.01 or any("Raise omega_max" in m for m in w))
    case("fit(X, y + 1e8): warning naming fit_intercept",
         lambda: fit(X, y + 1e8).score(X, y + 1e8),
         check=lambda r, w: abs(r - base) < 0.01 or any("fit_intercept=True" in m for m in w))
    Xm, ym = make_hmoe_regression(1000, n_features=2, gate="none", random_state=0)
    base_m = fit(Xm, ym, gate="none").score(Xm, ym)
    for c in (1e-8, 1e3, 1e8):
        case(f"MHA fit(X, {c:g} * y): same R² or a warning naming the fix",
             lambda c=c: fit(Xm, c * ym, gate="none").score(Xm, c * ym),
             check=lambda r, w: abs(r - base_m) < 0.01 or any("Raise omega_max" in m for m in w))
    case("MHA fit(X, y + 1e8): warning naming fit_intercept",
         lambda: fit(Xm, ym + 1e8, gate="none").score(Xm, ym + 1e8),
         check=lambda r, w: abs(r - base_m) < 0.01 or any("fit_intercept=True" in m for m in w))
    for c in (1e-6, 1e8):
        case(f"fit({c:g} * X, y): same R² or a warning naming the fix",
             lambda c=c: fit(c * X, y).score(c * X, y),
             check=lambda r, w: abs(r - base) < 0.01 or any("param_bound" in m for m in w))
    yo = y.astype(object)
    yo[3] = None
    case("y with a None", lambda: fit(X, yo))
    case("y as strings", lambda: fit(X, y.astype(str)))
    case("y as words", lambda: fit(X, np.array(["a"] * len(y))))
    case("y * 1e300", lambda: fit(X, y * 1e300, max_iter=30))
    case("y with NaN", lambda: fit(X, np.where(np.arange(len(y)) == 5, np.nan, y)))
    case("y with inf", lambda: fit(X, np.where(np.arange(len(y)) == 5, np.inf, y)))
    case("complex y", lambda: fit(X, y + 1j))
    case("X with NaN", lambda: fit(np.where(X > 0.99, np.nan, X), y))
    case("X 1-D", lambda: fit(X[:, 0], y))
    case("y of another length", lambda: fit(X, y[:-1]))
    case("1 sample", lambda: fit(X[:1], y[:1]))
    case("init=3", lambda: fit(X, y, init=3))
    case("init='near'", lambda: fit(X, y, init="near"))
    case("init of the wrong shape", lambda: fit(X, y, init=MixingMeasure(
        [[1.0]], np.zeros((1, 2, 3, 3)), np.ones((1, 2, 1, 3)))))
    case("n_heads=10**6 on 300 samples", lambda: fit(X[:300], y[:300], n_heads=10**6))
    case("n_tokens=10**6 on 300 samples", lambda: fit(X[:300], y[:300], n_tokens=10**6))
    case("n_experts=0", lambda: fit(X, y, n_experts=0))
    case("n_starts=-1", lambda: fit(X, y, n_starts=-1))
    case("tol=0", lambda: fit(X, y, tol=0))
    case("omega_max=nan", lambda: fit(X, y, omega_max=float("nan")))
    case("gate='G2'", lambda: fit(X, y, gate="G2"))
    case("activation='relu'", lambda: fit(X, y, activation="relu"))
    est = fit(X, y, max_iter=50)
    case("predict with 3 features", lambda: est.predict(np.ones((2, 3))))
    case("predict unfitted", lambda: HMoERegressor().predict(X))
    G = MixingMeasure(np.ones((1, 2)), np.zeros((1, 3, 2, 2)), np.ones((1, 3, 2, 2)))
    from sklearn.linear_model import LinearRegression

    lr = LinearRegression().fit(X, y)
    case("scorer on LinearRegression", lambda: make_voronoi_scorer(G)(lr, X, y))
    case("scorer on an unfitted HMoERegressor",
         lambda: make_voronoi_scorer(G)(HMoERegressor(), X, y))
    d = G.to_dict()
    del d["a"]
    case("from_dict without 'a'", lambda: MixingMeasure.from_dict(d))
    case("from_dict of a list", lambda: MixingMeasure.from_dict([1, 2]))
    case("permuted(tokens=[1])", lambda: G.permuted(tokens=[1]))
    case("permuted(channels=[0, 0])", lambda: G.permuted(channels=[0, 0]))
    case("permuted(channels=[0, 5])", lambda: G.permuted(channels=[0, 5]))
    case("permuted(heads=[1])", lambda: G.permuted(heads=[1]))
    case("permuted(tokens=[0.5, 1, 2])", lambda: G.permuted(tokens=[0.5, 1, 2]))
    case("regression_function(complex X)",
         lambda: regression_function(G, np.ones((2, 2)) * (1 + 2j)))
    case("MixingMeasure(complex omega)",
         lambda: MixingMeasure(np.array([[1 + 1j, 1.0]]), np.zeros((1, 3, 2, 2)),
                               np.ones((1, 3, 2, 2))))
    case("MixingMeasure(M = 1e308 everywhere): finite M",
         lambda: MixingMeasure([[1.0]], np.full((1, 2, 2, 2), 1e308), np.ones((1, 2, 1, 2))),
         check=lambda G, w: bool(np.all(np.isfinite(G.M))), expect_error=False)
    M = np.zeros((1, 2, 1, 1))
    M[0, 0], M[0, 1] = 1e308, -1e308
    case("MixingMeasure(M = ±1e308)", lambda: MixingMeasure([[1.0]], M, np.ones((1, 2, 1, 1))))
    case("MixingMeasure(asymmetric M)", lambda: MixingMeasure(
        [[1.0]], np.array([[[[0, 1], [0, 0]]] * 2], dtype=float), np.ones((1, 2, 1, 2))))
    case("regression_function(G, X of width 3)", lambda: regression_function(G, np.ones((2, 3))))
    rng = np.random.default_rng(0)
    W_Q, W_K, W_V = rng.normal(size=(3, 2, 4, 3))
    W_O = rng.normal(size=(2, 3, 4))
    case("multihead_attention(X * 1e160)",
         lambda: multihead_attention(rng.normal(size=(5, 4)) * 1e160, W_Q, W_K, W_V, W_O))
    case("multihead_attention(W_O of the wrong shape)",
         lambda: multihead_attention(rng.normal(size=(5, 4)), W_Q, W_K, W_V, W_O[:, :2]))


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


def study_cases(tmp):
    def write(name, text, mode="w"):
        path = os.path.join(tmp, name)
        with open(path, mode) as fh:
            fh.write(text)
        return path

    small = write("small.toml", SMALL_TOML)
    done = os.path.join(tmp, "done")
    cli("a small study runs", ["study", small, "--out", done, "--n-jobs", "1", "--no-plot",
                               "--no-progress"], cwd=tmp, expect=0)
    for label, line in (("truth = 3", "truth = 3"), ("grid = 3", "grid = 3"),
                        ("truth = [1]", "truth = [1]"), ("data = 0", "data = 0"),
                        ("fit = 'x'", 'fit = "x"'), ("metrics = []", "metrics = []")):
        cfg = write("bad.toml", f'models = ["none"]\n{line}\n')
        cli(f"config with top-level {label}", ["study", cfg, "--out", "o1"], cwd=tmp)
    cfg = write("latin.toml", SMALL_TOML.replace("small", "sm\xe4ll").encode("latin-1"), "wb")
    cli("non-UTF-8 TOML", ["study", cfg, "--out", "o2"], cwd=tmp)
    cli("/dev/zero as config", ["study", "/dev/zero", "--out", "o3"], cwd=tmp)
    cfg = write("tz.toml", SMALL_TOML.replace("[truth]\nn_features = 2\nseed = 1",
                                              '[truth]\nfile = "/dev/zero"'))
    cli("/dev/zero as truth file", ["study", cfg, "--out", "o4"], cwd=tmp)
    cfg = write("reps.toml", SMALL_TOML.replace("reps = 2", "reps = 100000000"))
    cli("reps = 100000000 with --max-fits 0", ["study", cfg, "--out", "o5", "--max-fits", "0"],
        cwd=tmp)
    cfg = write("bign.toml", SMALL_TOML.replace("n = [40, 80]", "n = [40, 10000000000]"))
    cli("n = 1e10 on the grid", ["study", cfg, "--out", "o6", "--max-fits", "0"], cwd=tmp)
    cli("--max-fits -1", ["study", small, "--out", "o7", "--max-fits", "-1"], cwd=tmp)
    cli("--n-jobs 0", ["study", small, "--out", "o8", "--n-jobs", "0"], cwd=tmp)
    cfg = write("esc.toml", SMALL_TOML.replace('name = "small"', 'name = "x/../../../escape"'))
    sub = os.path.join(tmp, "a", "b")
    os.makedirs(sub)
    cli("name = 'x/../../../escape' stays in the working directory",
        ["study", cfg, "--max-fits", "0", "--n-jobs", "1", "--no-progress"], cwd=sub, expect=0,
        check=lambda p: not os.path.exists(os.path.join(tmp, "escape")))
    other = write("other.toml", SMALL_TOML.replace("seed = 3", "seed = 4"))
    err = cli("another config into a used OUT", ["study", other, "--out", done], cwd=tmp)
    hint = re.search(r"`hmoe-estim (study [^`]+)`", err)
    cli("the refusal's hint resumes", [*(hint.group(1).split() if hint else ["study", "?"]),
                                       "--n-jobs", "1", "--no-plot", "--no-progress"],
        cwd=tmp, expect=0, check=lambda p: "0 fits run, 4 already done" in p.stderr
        and f"output in {done}" in p.stderr)
    cli("study OUT/config.json resumes OUT", ["study", os.path.join(done, "config.json"),
                                               "--n-jobs", "1", "--no-plot", "--no-progress"],
        cwd=tmp, expect=0, check=lambda p: "0 fits run, 4 already done" in p.stderr
        and f"output in {done}" in p.stderr)
    os.makedirs(os.path.join(tmp, "figs"))
    cli("plot --output DIR", ["plot", done, "--output", "figs"], cwd=tmp, expect=0,
        check=lambda p: os.path.exists(os.path.join(tmp, "figs", "learning_curves.png"))
        and "figs/learning_curves.png" in p.stdout)
    cli("plot --output /missing/x.png", ["plot", done, "--output", "/missing/x.png"], cwd=tmp)
    cli("rates of a missing OUT", ["rates", os.path.join(tmp, "nope")], cwd=tmp)

    def variant(name, edit):
        import shutil

        out = os.path.join(tmp, name)
        shutil.copytree(done, out)
        edit(out)
        return out

    def foreign_seed(out):
        path = os.path.join(out, "results.jsonl")
        lines = open(path).read().splitlines()
        rec = json.loads(lines[0])
        rec["seed"] += 1
        lines[0] = json.dumps(rec)
        open(path, "w").write("\n".join(lines) + "\n")

    def string_n(out):
        path = os.path.join(out, "results.jsonl")
        rec = json.loads(open(path).read().splitlines()[0])
        rec["n"] = "abc"
        open(path, "a").write(json.dumps(rec) + "\n")

    def bad_truth(out):
        open(os.path.join(out, "truth.json"), "w").write('{"measure": {"omega": [[1')

    def no_measure(out):
        open(os.path.join(out, "truth.json"), "w").write('{"shape": {}}')

    def zero_config(out):
        open(os.path.join(out, "config.json"), "w").write("[]")

    for name, edit in (("foreign-seed", foreign_seed), ("string-n", string_n),
                       ("corrupt-truth", bad_truth), ("truth-without-measure", no_measure),
                       ("config-json-a-list", zero_config)):
        out = variant(name, edit)
        cli(f"resume with {name}", ["study", small, "--out", out, "--n-jobs", "1"], cwd=tmp)
    cli("rates with a foreign seed", ["rates", os.path.join(tmp, "foreign-seed")], cwd=tmp)
    cli("rates with n = 'abc'", ["rates", os.path.join(tmp, "string-n")], cwd=tmp)
    ro = os.path.join(tmp, "ro")
    with open(ro, "w"):
        pass
    cli("--out under a file", ["study", small, "--out", os.path.join(ro, "x")], cwd=tmp)


def kill_and_resume(tmp):
    """SIGKILL a --n-jobs 2 study mid-run; count surviving workers, then resume and count."""
    cfg = os.path.join(tmp, "kill.toml")
    with open(cfg, "w") as fh:
        fh.write(SMALL_TOML.replace("n = [40, 80]", "n = [3000, 6000]")
                 .replace("max_iter = 15", "max_iter = 2000").replace("reps = 2", "reps = 3")
                 .replace('models = ["none"]', 'models = ["none", "value"]'))
    out = os.path.join(tmp, "killed")
    env = dict(os.environ, PYTHONPATH=ROOT)
    argv = [sys.executable, "-m", "hmoe_estim", "study", cfg, "--out", out, "--no-progress",
            "--no-plot"]
    p = subprocess.Popen(argv + ["--n-jobs", "2"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    path = os.path.join(out, "results.jsonl")
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            break
        time.sleep(0.2)
    kids = _children(p.pid)
    p.send_signal(signal.SIGKILL)
    p.wait()
    def keys():
        with open(path) as fh:
            return [tuple(json.loads(ln)[k] for k in ("model", "n", "rep")) for ln in fh
                    if ln.endswith("\n")]

    before = set(keys()) if os.path.exists(path) else set()
    time.sleep(5)
    alive = [k for k in kids if os.path.exists(f"/proc/{k}")
             and open(f"/proc/{k}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    results.append(("SIGKILL --n-jobs 2: no worker alive 5 s later",
                    "correct" if not alive else "silent"))
    print(f"{results[-1][1]:24s} {results[-1][0]} ({len(kids)} workers)", flush=True)
    subprocess.run(argv + ["--n-jobs", "1"], env=env, capture_output=True, timeout=600)
    after = keys()
    lost = len(before - set(after))
    ok = len(after) == len(set(after)) == 12 and lost == 0
    results.append(("SIGKILL then resume: every fit exactly once", "correct" if ok else "silent"))
    print(f"{results[-1][1]:24s} {results[-1][0]} ({len(before)} before, {len(after)} after)",
          flush=True)
    return lost


def main():
    with tempfile.TemporaryDirectory() as tmp:
        estimator_cases()
        study_cases(tmp)
        lost = kill_and_resume(tmp)
    counts = {}
    for _, outcome in results:
        key = outcome.split(" ")[0]
        counts[key] = counts.get(key, 0) + 1
    print(f"\ncases tried: {len(results)}; correct: {counts.get('correct', 0)}; clear errors: "
          f"{counts.get('clear', 0)}; silent wrong results: {counts.get('silent', 0)}; "
          f"tracebacks: {counts.get('traceback', 0)}; hangs: {counts.get('hang', 0)}; "
          f"fits lost: {lost}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
