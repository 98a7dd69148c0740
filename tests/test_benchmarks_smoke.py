"""Smoke tests of the benchmark scripts (no timing assertions).

- ``benchmarks/bench_kernels.py --quick`` runs on a tiny problem in a subprocess with whatever
  peers are installed (without torch/jax it still compares the Numba kernel with NumPy), exits
  0 and prints its table;
- the NumPy peer, which the benchmark checks the kernel against, is itself checked against
  independent evaluations: its objective against the loop-by-loop ``f_ref`` of
  ``tests/reference.py`` and its gradient against central finite differences.
"""

import ast
import os
import subprocess
import sys

import numpy as np
import pytest

from .reference import f_ref

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks")


def _bench_module(name):
    """A script of ``benchmarks/`` imported as a module."""
    import importlib

    sys.path.insert(0, BENCH)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(BENCH)


@pytest.fixture(scope="module")
def peers():
    return _bench_module("peers")


@pytest.fixture(scope="module")
def bs():
    return _bench_module("bench_solver")


#: A wide-suite plan of four one-head fits at n = 300 (two groups of two), for stubbed runs.
TINY_WIDE = ["--suite", "wide", "--fits-per-group", "2", "--gate-acts",
             "value:sigmoid,sdpa:sigmoid", "--heads", "1", "--tokens", "2", "--features", "2",
             "--n", "300", "--threads", "1"]


def _fake_lm():
    """The ``lm`` record of a stubbed fit (nothing fitted)."""
    return {"excess_sigma2_over_n": -1.0, "wall": 0.0, "cpu": 0.0, "passes": 0,
            "search_rounds": 1, "n_starts_agreeing": 1, "n_rounds_agreeing": 1,
            "failure": False}


def test_bench_kernels_quick_runs():
    cmd = [sys.executable, os.path.join(BENCH, "bench_kernels.py"), "--quick", "--sizes",
           "300", "--no-wait", "--threads", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "hmoe ms" in out and "numpy/hmoe" in out, out
    for gate in ("none", "value", "sdpa"):
        assert f" {gate} " in out, out
    assert "Ratios (peer time / hmoe time)" in out, out


def test_bench_kernels_gn_ratio_runs():
    # the Gauss-Newton pass against objective+gradient, with the earlier pass as reference
    # (the script exits 2 if the two JᵀJ differ)
    cmd = [sys.executable, os.path.join(BENCH, "bench_kernels.py"), "--gn-ratio", "--quick",
           "--sizes", "600", "--shapes", "1,2,1,2", "--no-wait", "--threads", "1"]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "JtJ old ms" in res.stdout and "cpu=" in res.stdout, res.stdout


def _unpack(theta, shape):
    H, N, K, D = shape
    T = D * (D + 1) // 2
    o1, o2 = H * K, H * K + H * (N - 1) * T
    omega = theta[:o1].reshape(H, K)
    M = np.zeros((H, N, D, D))
    p, q = np.triu_indices(D)
    tri = theta[o1:o2].reshape(H, N - 1, T)
    M[:, : N - 1, p, q] = tri
    M[:, : N - 1, q, p] = tri
    return omega, M, theta[o2:].reshape(H, N, K, D)


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
@pytest.mark.parametrize("activation", ["sigmoid", "tanh"])
def test_numpy_peer_matches_reference(peers, gate, activation):
    shape = (2, 3, 2, 3)
    X, y, theta = peers.make_case(shape, 40, seed=4)
    fg = peers.make_numpy(X, y, shape, gate, activation)
    value, grad = fg(theta)
    omega, M, a = _unpack(theta, shape)
    expected = np.mean((f_ref(omega, M, a, X, gate=gate, activation=activation) - y) ** 2)
    assert value == pytest.approx(expected, rel=1e-12)
    h = 1e-6
    fd = np.empty_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        fd[j] = (fg(theta + e)[0] - fg(theta - e)[0]) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8 * np.max(np.abs(fd)))


def test_peer_registry(peers):
    ok, skipped = peers.available_peers()
    assert "numpy" in ok
    assert set(ok) | set(skipped) == set(peers.PEER_NAMES)
    with pytest.raises(ValueError, match="Unknown implementation"):
        peers.make_peer("fortran", np.zeros((2, 2)), np.zeros(2), (1, 2, 1, 2))
    with pytest.raises(ValueError, match="Unknown gate"):
        peers.make_numpy(np.zeros((2, 2)), np.zeros(2), (1, 2, 1, 2), gate="dense")


def test_bench_solver_quick_runs(tmp_path):
    out = tmp_path / "solver.json"
    cmd = [sys.executable, os.path.join(BENCH, "bench_solver.py"), "--quick", "--threads", "1",
           "--json", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "lm fail" in res.stdout and "lbfgs fail" in res.stdout and "trf fail" in res.stdout
    import json

    data = json.loads(out.read_text())
    assert len(data["cases"]) == 4
    for case in data["cases"]:
        for m in ("lbfgs", "trf", "lm"):
            r = case["result"]["methods"][m]
            assert np.isfinite(r["objective"]) and r["passes"] > 0


def test_bench_solver_design(bs):
    """The truths suite's default design: 12 shapes x 2 n x 2 seeds + 2 large fits per group."""
    from collections import Counter

    gates = ["none", "value", "sdpa"]
    plan = bs.truths_plan(bs.parse_args([]), [1000, 10000], gates)
    per_group = Counter((g, a, K) for g, a, K, *_ in plan)
    assert len(per_group) == 18 and set(per_group.values()) == {50}
    assert {p[3] for p in plan} == set(bs.FULL_SHAPES)
    # a new truth for every shape, seed and n: 12 x 2 x 2, and 2 at the large n
    assert len({(p[3], p[4]) for p in plan}) == 50
    assert sum(p[6] == 100_000 for p in plan) == 36
    # --first-seed 2 extends the design with new truths: seeds 2 and 3, large ones included;
    # with the default run it makes the design of --seeds 4 --large-seeds 4
    more = bs.truths_plan(bs.parse_args(["--first-seed", "2"]), [1000, 10000], gates)
    assert not set(plan) & set(more) and {p[7] for p in more} == {2, 3}
    assert not {(p[3], p[4]) for p in plan} & {(p[3], p[4]) for p in more}
    four = bs.truths_plan(bs.parse_args(["--seeds", "4", "--large-seeds", "4"]),
                          [1000, 10000], gates)
    assert sorted(plan + more) == sorted(four)
    # the earlier narrow design is reproduced exactly: H = 1, N = 2, D = 2 + seed mod 2
    small = bs.truths_plan(bs.parse_args(["--shapes", "small", "--seeds", "3"]),
                           [1000, 10000], gates)
    assert len(small) == 108 and {p[3] for p in small} == {(1, 2, 2), (1, 2, 3)}
    assert all(p[3][2] == 2 + p[7] % 2 and p[4] == 1000 + p[7] for p in small)
    assert bs.parse_shapes("1x2x2,2x3x4") == [(1, 2, 2), (2, 3, 4)]
    with pytest.raises(SystemExit, match="HxNxD"):
        bs.parse_shapes("1x2")
    assert bs.upper_bound(0, 50) == pytest.approx(1 - 0.05 ** (1 / 50))


def test_bench_solver_wide_design(bs):
    """The wide suite's default plan: 16 groups x 24 fits, balanced factors, fresh truths."""
    from collections import Counter

    args = bs.parse_args(["--suite", "wide"])
    assert args.methods == "lm" and args.gates == "none,value,sdpa,output"
    plan = bs.wide_plan(args, [1000, 10000], args.gates.split(","))
    assert len(plan) == 384 and [p["index"] for p in plan] == list(range(384))
    groups = Counter((p["gate"], p["activation"]) for p in plan)
    assert len(groups) == 16 and set(groups.values()) == {24}
    assert min(Counter((p["H"], p["N"]) for p in plan).values()) >= 42
    for factor, levels in (("K", 2), ("n", 2), ("D", 3)):
        per_group = Counter((p["gate"], p["activation"], p[factor]) for p in plan)
        assert len(per_group) == 16 * levels and set(per_group.values()) == {24 // levels}
    # every (H, N) cell meets every D, K and n
    for factor in ("D", "K", "n"):
        assert min(Counter((p["H"], p["N"], p[factor]) for p in plan).values()) >= 10
    # a fresh truth, data set and fit seed per fit; scales cover [1, 3]
    for key in ("truth_seed", "data_seed", "fit_seed"):
        assert len({p[key] for p in plan}) == 384
    scales = [p["scale"] for p in plan]
    assert 1.0 <= min(scales) < 1.1 and 2.9 < max(scales) <= 3.0
    # interleaved: every prefix of whole rounds is balanced; the 2 shards split every group
    assert set(Counter((p["gate"], p["activation"]) for p in plan[:16]).values()) == {1}
    shards = Counter((p["gate"], p["activation"], p["index"] % 2) for p in plan)
    assert set(shards.values()) == {12}
    other = bs.wide_plan(bs.parse_args(["--suite", "wide", "--first-seed", "1"]),
                         [1000, 10000], args.gates.split(","))
    assert not {p["truth_seed"] for p in plan} & {p["truth_seed"] for p in other}


def test_bench_solver_search_knobs(bs):
    """``--search``: the knobs parsed, refused with the valid ones named, and given to the
    default search (``per_head`` to the head restarts the schedule resolves)."""
    from hmoe_estim.solvers import ExpertReassignment, HeadRestarts, SoftModes

    assert bs.parse_search(None) == {} and bs.parse_search("") == {}
    assert bs.parse_search("rounds=1,race_iter=10") == {"rounds": 1, "race_iter": 10}
    for bad in ("rounds=0", "rounds=x", "hop=2", "rounds"):
        with pytest.raises(ValueError, match="KNOB=N with N >= 1 and KNOB one of"):
            bs.parse_search(bad)
    with pytest.raises(SystemExit):
        bs.parse_args(["--suite", "wide", "--search", "moves=3"])
    args = bs.parse_args(["--search", "per_head=16"])
    assert args.search == "per_head=16" and args.search_knobs == {"per_head": 16}
    assert bs.parse_args([]).search_knobs == {}
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 2)), rng.normal(size=50)
    search = bs.make_lm_search({"per_head": 16, "rounds": 2}, X, y, (2, 2, 2, 2), "value",
                               "tanh")
    assert search.rounds == 2 and search.race_iter == "auto"
    assert [type(m) for m in search.moves] == [HeadRestarts, ExpertReassignment, SoftModes]
    assert search.moves[0].per_head == 16
    assert bs.make_lm_search({"per_head": 16}, X, y, (1, 2, 2, 2), "none", "sigmoid").moves == []
    assert bs.make_lm_search({"rounds": 1}, X, y, (2, 2, 2, 2), "none",
                             "sigmoid").moves == "auto"


def test_bench_solver_wide_shards_merge(tmp_path):
    """A tiny wide plan: the report keys, and 2 shards + --merge reproduce the whole plan."""
    import json

    tiny = ["--suite", "wide", "--fits-per-group", "2", "--gate-acts",
            "value:sigmoid,sdpa:tanh", "--heads", "1", "--tokens", "2", "--features", "2,3",
            "--n", "300", "--threads", "1"]
    script = os.path.join(BENCH, "bench_solver.py")

    def run(*extra):
        res = subprocess.run([sys.executable, script, *tiny, *extra], capture_output=True,
                             text=True, timeout=300, cwd=ROOT)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    whole, a, b, merged = (tmp_path / f"{name}.json" for name in ("whole", "a", "b", "m"))
    out = run("--json", str(whole))
    assert "per (H, N)" in out and "failures with agreement" in out and "P^" in out, out
    assert "where the search's seconds go" in out, out
    run("--shard", "0/2", "--json", str(a))
    run("--shard", "1/2", "--json", str(b))
    out = run("--merge", str(a), str(b), "--json", str(merged))
    assert "4 of 4 plan items" in out, out
    full, both = json.loads(whole.read_text()), json.loads(merged.read_text())
    assert full["complete"] and both["complete"] and len(full["cases"]) == 4
    rep = full["report"]
    for key in ("groups", "HN", "K", "overall", "wall_vs_P", "failures_with_agreement"):
        assert key in rep, key
    assert rep["overall"]["fits"] == 4 and set(rep["failures_with_agreement"]) == {
        "failures", "agreeing_ge2", "agreeing_ge3", "rounds_agreeing_ge2"}
    # the phases' shares of the search's seconds: every fit's record, each row summing to 100
    phases = rep["phases"]
    assert phases[0][:5] == ["H", "gate", "activation", "fits", "race %"], phases[0]
    assert phases[-1][0] == "all" and phases[-1][3] == 4, phases
    assert all(abs(sum(row[4:]) - 100) < 0.5 for row in phases[1:]), phases
    case = full["cases"][0]
    for key in ("P", "scale", "truth_seed", "data_seed", "fit_seed"):
        assert key in case, key
    assert "n_rounds_agreeing" in case["result"]["methods"]["lm"]
    lm = case["result"]["methods"]["lm"]
    assert lm["search_rounds"] >= 1 and len(lm["start_objectives"]) >= 1
    # the shards' fits are those of the unsharded run, bit for bit
    assert [c["index"] for c in both["cases"]] == [0, 1, 2, 3]
    strip = ("wall", "cpu", "search_cost")
    for c1, c2 in zip(full["cases"], both["cases"]):
        r1, r2 = c1["result"]["methods"]["lm"], c2["result"]["methods"]["lm"]
        assert {k: v for k, v in r1.items() if k not in strip} == \
            {k: v for k, v in r2.items() if k not in strip}
        # the phases' passes are the same; their seconds are timings
        assert {k: v["passes"] for k, v in r1["search_cost"].items()} == \
            {k: v["passes"] for k, v in r2["search_cost"].items()}
        assert {k: v for k, v in c1.items() if k != "result"} == \
            {k: v for k, v in c2.items() if k != "result"}
    assert both["report"]["groups"][1:] != [] and [r[:4] for r in both["report"]["groups"]] == \
        [r[:4] for r in rep["groups"]]
    # --pool: the report over parts (here the same part twice) and the targets' verdict
    pooled = tmp_path / "pooled.json"
    out = run("--pool", str(whole), str(merged), "--json", str(pooled))
    assert "pooled parts" in out and "targets: overall" in out, out
    pool = json.loads(pooled.read_text())
    assert pool["report"]["overall"]["fits"] == 8 and "groups_above" in pool["targets"]
    # --replay-rounds: the recorded fits with at most 1, 2, ... rounds; the last cap is the run
    replay = tmp_path / "replay.json"
    out = run("--replay-rounds", str(whole), "--json", str(replay))
    assert "replayed 4 recorded fits" in out, out
    replayed = json.loads(replay.read_text())
    table = replayed["table"]
    lms = [c["result"]["methods"]["lm"] for c in full["cases"]]
    most = max(m["search_rounds"] for m in lms)
    assert [r[0] for r in table[1:]] == list(range(1, most + 1)), table
    warned = sum(m["search_rounds"] > 1 and m["n_rounds_agreeing"] < 2 for m in lms)
    assert table[-1][1:] == [4, sum(m["failure"] for m in lms), 0, warned, 1.0], table
    assert "caps growing with P" in out and len(replayed["by_P"]) == 6
    full["complete"] = False
    whole.write_text(json.dumps(full))
    res = subprocess.run([sys.executable, script, "--pool", str(whole)], capture_output=True,
                         text=True, timeout=300, cwd=ROOT)
    assert res.returncode != 0 and "not a finished wide-suite run" in res.stderr + res.stdout


def test_an_interrupted_resume_keeps_the_cases_it_had_not_reached(tmp_path, monkeypatch, bs):
    # a wide-suite file with holes (items 0 and 2 missing) is resumed; the run is interrupted
    # while fitting item 2: items 1 and 3, in the file but not reached, must still be there
    import json

    path = tmp_path / "resume.json"
    args = bs.parse_args(TINY_WIDE + ["--json", str(path), "--resume"])
    n_values, gates, methods = [300], ["none", "value", "sdpa", "output"], ["lm"]
    plan = bs.wide_plan(args, n_values, gates)
    assert [it["index"] for it in plan] == [0, 1, 2, 3]
    meta = {**bs._wide_meta(args, n_values, gates, methods, len(plan)), "shard": None}
    path.write_text(json.dumps({**meta, "complete": False, "cases": [
        {**plan[i], "result": {"methods": {}}, "kept": True} for i in (1, 3)]}))
    calls = []

    def one_case(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return {"methods": {"lm": _fake_lm()}}

    monkeypatch.setattr(bs, "one_case", one_case)
    with pytest.raises(KeyboardInterrupt):
        bs.run_wide(args, n_values, gates, methods)
    saved = json.loads(path.read_text())
    assert not saved["complete"]
    assert sorted(c["index"] for c in saved["cases"]) == [0, 1, 3]
    assert all(c.get("kept") for c in saved["cases"] if c["index"] != 0)


def test_a_merge_is_complete_when_its_files_cover_the_plan(tmp_path, bs):
    # a file with holes (items 0 and 2 to be refitted, say) and a file holding just those two
    # merge into a finished part; without the second, the merge says INCOMPLETE
    import json

    args = bs.parse_args(TINY_WIDE)
    n_values, gates = [300], ["none", "value", "sdpa", "output"]
    plan = bs.wide_plan(args, n_values, gates)
    meta = {**bs._wide_meta(args, n_values, gates, ["lm"], len(plan)), "shard": None}
    holes, fills, merged = (str(tmp_path / f"{k}.json") for k in ("holes", "fills", "m"))
    for path, items, complete in ((holes, (1, 3), False), (fills, (0, 2), True)):
        with open(path, "w") as fh:
            json.dump({**meta, "complete": complete, "cases": [
                {**plan[i], "P": 13, "result": {"methods": {"lm": _fake_lm()}}}
                for i in items]}, fh)
    assert bs.merge_wide(bs.parse_args(["--merge", holes, fills, "--json", merged])) == 0
    assert json.loads(open(merged).read())["complete"]
    assert bs.merge_wide(bs.parse_args(["--merge", holes, "--json", merged])) == 0
    assert not json.loads(open(merged).read())["complete"]


def test_replay_round_cap_stops_as_the_search_does(bs):
    replay_round_cap = bs.replay_round_cap
    # three rounds of two starts, n = 100 (σ̂²/n = best/100): round bests 1.0, 0.5, 0.5001
    m = {"search_rounds": 3, "start_objectives": [1.0, 1.1, 0.5, 0.6, 0.5001, 0.7]}
    assert replay_round_cap(m, 100, 1) == (1.0, 1, 1)
    assert replay_round_cap(m, 100, 2) == (0.5, 2, 1)
    assert replay_round_cap(m, 100, 3) == (0.5, 3, 2)  # 0.5001 <= 0.5 + 0.5/100: agreement
    assert replay_round_cap(m, 100, 9) == (0.5, 3, 2)
    assert replay_round_cap(m, 10_000, 3) == (0.5, 3, 1)  # a finer unit: no agreement
    assert replay_round_cap({"search_rounds": 4, "start_objectives": m["start_objectives"]},
                            100, 2) is None  # starts that do not split into the rounds


def _run_peers_fit(tmp_path, *extra, hide_torch=False):
    import json

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if hide_torch:
        # a module named torch that fails to import, ahead of any installed one (as in CI)
        fake = tmp_path / "no_torch"
        fake.mkdir()
        (fake / "torch.py").write_text("raise ImportError('hidden by the smoke test')\n")
        env["PYTHONPATH"] = str(fake) + os.pathsep + env["PYTHONPATH"]
    out = tmp_path / "peers_fit.json"
    cmd = [sys.executable, os.path.join(BENCH, "bench_peers_fit.py"), "--quick", "--no-wait",
           "--threads", "1", "--json", str(out), *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "CPU:" in res.stdout and "median σ²/n vs truth" in res.stdout, res.stdout
    return res.stdout, json.loads(out.read_text())


def test_bench_peers_fit_quick_without_torch(tmp_path):
    """Without PyTorch the torch methods are reported as unavailable and skipped."""
    out, data = _run_peers_fit(tmp_path, hide_torch=True)
    assert "PyTorch unavailable" in out, out
    assert "torch" in data["unavailable"]
    assert len(data["records"]) == 2  # --quick: two cases, one truth each
    for rec in data["records"]:
        assert set(rec["methods"]) == {"lm", "lbfgs", "trf"}
        for r in rec["methods"].values():
            assert np.isfinite(r["objective"]) and r["wall"] > 0
            assert r["failure"] == (r["excess_sigma2_over_n"] > data["cert_tol"])
    for entry in data["summary"].values():
        assert set(entry["rows"]) == {"lm", "lbfgs", "trf"} and "torch_match" not in entry


def test_bench_peers_fit_quick_with_torch(tmp_path):
    pytest.importorskip("torch")
    out, data = _run_peers_fit(tmp_path, "--methods", "lm,torch", "--cases", "one-sigmoid")
    assert "sigmoid(u)" in out and "PyTorch L-BFGS against the default" in out, out
    (rec,) = data["records"]
    assert set(rec["methods"]) == {"lm", "torch4", "torch6"}
    starts = rec["torch_starts"]
    assert len(starts) == 6
    # the 4-start fit is the best of the first 4 of the same starts
    assert rec["methods"]["torch4"]["objective"] == min(s["objective"] for s in starts[:4])
    assert rec["methods"]["torch6"]["objective"] <= rec["methods"]["torch4"]["objective"]
    assert "torch_match" in data["summary"]["one-sigmoid"]


def test_bench_fit_scaling_quick_runs(tmp_path):
    # whole default fits at n = 300 and 1000 in one subprocess, and the wide suite's P table
    out = tmp_path / "fit_scaling.json"
    cmd = [sys.executable, os.path.join(BENCH, "bench_fit_scaling.py"), "--quick", "--no-wait",
           "--threads", "1", "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Fit time against n" in res.stdout and "time ~ n^b" in res.stdout, res.stdout
    import json

    data = json.loads(out.read_text())
    assert [r["n"] for r in data["vs_n"]["rows"]] == [300, 1000]
    assert all(f["passes"] > 0 and f["wall"] > 0 for r in data["runs"] for f in r["fits"])
    for r in data["runs"]:  # the peak after the warm-up's reset sees the data loaded after it
        if r["peak_method"].startswith("VmHWM"):
            assert r["peak_growth"] >= r["data_bytes"], r
    assert data["vs_P"] is None or data["vs_P"]["exponent_cpu"] is not None


def test_bench_fit_scaling_refresh_P_rewrites_part_two_only(tmp_path):
    # after the wide suite is refitted, part 2 is recomputed from it; part 1's fits are kept
    import json
    import shutil

    results = os.path.join(BENCH, "results")
    old = tmp_path / "fit_scaling.json"
    shutil.copy(os.path.join(results, "fit_scaling.json"), old)
    before = json.loads(old.read_text())
    before["vs_P"] = {"stale": True}
    old.write_text(json.dumps(before))
    wide = os.path.join(results, "solver_wide_one_head.json")
    cmd = [sys.executable, os.path.join(BENCH, "bench_fit_scaling.py"), "--refresh-P", str(old),
           "--wide", wide]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr
    after = json.loads(old.read_text())
    assert after["runs"] == before["runs"] and after["vs_n"] == before["vs_n"]
    n_fits = len(json.loads(open(wide).read())["cases"])
    assert after["vs_P"]["fits"] == n_fits and after["vs_P"]["exponent_cpu"] > 0
    res = subprocess.run(cmd[:-1] + [str(tmp_path / "missing.json")], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert res.returncode != 0 and "no wide-suite results" in res.stderr, res.stderr
    assert json.loads(old.read_text()) == after  # the earlier JSON is left as it was


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
@pytest.mark.parametrize("slot", [0, 1, 2])
def test_limit_threads_slot_gives_side_by_side_processes_their_own_cpus(slot):
    # benchmark processes run side by side (bench_solver --shard I/K) must not all be pinned
    # to the first CPU: slot k takes the k-th group of `threads` allowed CPUs, cyclically
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import _threads; "
            "allowed = sorted(os.sched_getaffinity(0)); "
            "kept = _threads.limit_threads(1, slot=int(sys.argv[2])); "
            "print(allowed, kept, sorted(os.sched_getaffinity(0)), sep=';')")
    res = subprocess.run([sys.executable, "-c", code, BENCH, str(slot)], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    allowed, kept, final = (ast.literal_eval(part) for part in res.stdout.strip().split(";"))
    assert kept == final == [allowed[slot % len(allowed)]]


def test_processes_sharing_a_claim_directory_fit_each_item_once(tmp_path, monkeypatch, bs):
    # --claim: two processes share a plan item by item; one is interrupted in its second fit
    # and resumed (it refits that item, its own claim); merged, every item is fitted once
    import json

    from hmoe_estim.model import n_params

    claims = tmp_path / "claims"
    a, other = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    tiny = ["--suite", "wide", "--fits-per-group", "2", "--gate-acts",
            "value:sigmoid,sdpa:sigmoid", "--heads", "1", "--tokens", "2,3", "--features",
            "2,3", "--n", "300", "--threads", "1", "--claim", str(claims)]
    n_values, gates, methods = [300], ["none", "value", "sdpa", "output"], ["lm"]
    plan = bs.wide_plan(bs.parse_args(tiny + ["--json", a]), n_values, gates)
    assert len(plan) == 4
    # slots: one per owner, the same on a restart
    assert bs.claim_slot(str(claims), a) == 0 and bs.claim_slot(str(claims), other) == 1
    assert bs.claim_slot(str(claims), a) == 0
    # the other process has already claimed the item of smallest P
    sizes = {it["index"]: n_params(it["H"], it["N"], it["K"], it["D"]) for it in plan}
    assert len(set(sizes.values())) > 1
    small = min(sizes, key=lambda i: (sizes[i], i))
    assert bs.claim_item(str(claims), small, other)
    fitted = []

    def one_case(X, y, G, shape, *rest, **kw):
        fitted.append(shape)
        if len(fitted) == 2:
            raise KeyboardInterrupt
        return {"methods": {"lm": _fake_lm()}}

    monkeypatch.setattr(bs, "one_case", one_case)

    def run(owner, *extra):
        bs.run_wide(bs.parse_args(tiny + ["--json", owner, *extra]), n_values, gates, methods)

    with pytest.raises(KeyboardInterrupt):
        run(a)
    # the costliest item first; the interrupted one stays claimed by a
    first = json.loads(open(a).read())["cases"]
    assert [sizes[c["index"]] for c in first] == [max(sizes.values())]
    run(a, "--resume")
    mine = sorted(c["index"] for c in json.loads(open(a).read())["cases"])
    assert mine == sorted(set(sizes) - {small}) and len(fitted) == 4  # 2, then 2 more
    run(other)
    theirs = [c["index"] for c in json.loads(open(other).read())["cases"]]
    assert theirs == [small] and len(fitted) == 5
    merged = str(tmp_path / "m.json")
    assert bs.merge_wide(bs.parse_args(["--merge", a, other, "--json", merged])) == 0
    data = json.loads(open(merged).read())
    assert data["complete"] and [c["index"] for c in data["cases"]] == [0, 1, 2, 3]
    # a claim run needs its own file and no shard
    for bad in (["--shard", "0/2", "--json", a], []):
        with pytest.raises(SystemExit):
            bs.parse_args(tiny + bad)
