"""Solver benchmark: certified failures, wall time and kernel passes of three fitting methods.

A suite of known truths ``G*`` (``K* = 2``; ``H* = H``, ``N* = N``, ``D`` on the grid of
``--shapes``; gates none/value/sdpa × activations sigmoid/tanh/gelu/silu — one activation for
the ungated MHA, which has none; fitted with the true ``H``, ``N`` and ``K = K*`` or
``K = K* + 1``; several seeds; ``n`` on a grid), each fitted by

- ``lbfgs``: ``HMoERegressor(solver="lbfgs")`` — 4 random L-BFGS-B starts (the earlier
  default);
- ``trf``: ``scipy.optimize.least_squares(method="trf")`` from the same 4 starts, with the
  explicit n × P Jacobian of :func:`hmoe_estim.kernels.jacobian.jacobian_matrix` (the same
  derivatives as the fused kernel) and the same box; best of the 4;
- ``lm``: ``HMoERegressor()`` with the new defaults (``solver="lm"``, racing).

Design of the truths suite (default ``--shapes full``): every shape ``(H, N, D)`` with
``H`` in {1, 2}, ``N`` in {2, 3}, ``D`` in {2, 3, 4} (12 shapes), ``--seeds`` truths per shape
and ``n`` (a new truth and data set for each seed and ``n``; default 2), ``n`` in ``--n``
(default 10^3, 10^4); in addition ``--large-seeds`` truths (default 2) at ``n = --large-n``
(default 10^5) for the shapes of ``--large-shapes`` (default the smallest, ``1x2x2``). With
the defaults each (gate, activation, K) group has 12 × 2 × 2 + 2 = 50 fits, 900 in all (about
75 min for ``lm`` alone at one thread on the project's 2-core machine). ``--first-seed S``
numbers the seeds from ``S``: a run with ``--first-seed 2`` fits two new truths per shape and
``n`` (and at the large ``n``), so that with a default run it makes 100 fits per group, the
design of ``benchmarks/results/solver_suite.json``. ``--shapes small``
is the earlier, narrower design of ``solver.json`` (``H = 1``, ``N = 2``, ``D = 2 + seed mod
2``, one truth per seed for every ``n``, no large ``n``); ``--shapes`` also takes a list such
as ``1x2x2,2x3x4`` (``HxNxD``).

Certificate: with ``K >= K*`` the truth is feasible (for ``K = K* + 1`` embedded with an extra
zero-weight channel), so a fit whose objective exceeds the truth's objective by more than
``--cert-tol`` (in units of ``σ²/n``) is a *certified optimisation failure*. Reported per
(gate, activation, K) group and overall: number of fits, certified failures, failure rate with
its one-sided 95% Clopper–Pearson upper bound, median wall time per fit, median kernel passes
per fit (objective+gradient evaluations for L-BFGS-B; Jacobian + forward passes for LM and trf,
abandoned race candidates included); a second table gives the same per shape. The JSON keeps
every case (shape, seeds, ``n``, per method: objective, excess over the truth in ``σ²/n``,
wall, passes, starts); it is rewritten after every fit, so an interrupted run keeps its cases.

``--suite tanh`` fits the hard case ``D = 2``, ``K = K* = 2``, tanh, value gate, ``σ = 0.05``
(use ``--n 20000``) with ``lbfgs`` and ``lm``, and counts the starts that reach the truth's
objective. ``--suite preset`` instead fits the quick preset's configuration (``D = 3``, ``K* = 2``
fitted
with ``K = 3``, sigmoid, ``σ = 0.1``, gates none/value/sdpa, the preset's truth) with
``lbfgs`` and ``lm`` over replications of the data, at the ``--n`` values.

Usage::

    python benchmarks/bench_solver.py --quick                     # smoke test
    python benchmarks/bench_solver.py --methods lm --threads 1 \
        --json benchmarks/results/solver_suite.json               # the full design, lm only
    python benchmarks/bench_solver.py --seeds 1 --n 1000 --large-seeds 0 --threads 1 \
        --json benchmarks/results/solver_suite_compare.json       # 3 methods, 1 truth/shape
    python benchmarks/bench_solver.py --suite preset --n 10000,100000 --reps 8 --json OUT
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, limit_threads  # noqa: E402

GATE_ACTS = {"none": ["sigmoid"], "value": ["sigmoid", "tanh", "gelu", "silu"],
             "sdpa": ["sigmoid", "tanh", "gelu", "silu"]}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--suite", choices=["truths", "preset", "tanh"], default="truths")
    ap.add_argument("--n", default="1000,10000", help="sample sizes, comma-separated")
    ap.add_argument("--seeds", type=int, default=2,
                    help="truths per shape and n (truths suite; 2)")
    ap.add_argument("--shapes", default="full",
                    help="truths suite: 'full' (H 1-2 x N 2-3 x D 2-4), 'small' (H=1, N=2, "
                         "D 2-3) or a list HxNxD,... (full)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="truths suite: seeds first-seed, ..., first-seed + seeds - 1 (also for "
                         "--large-seeds): new truths that extend a design run with the same "
                         "options (0)")
    ap.add_argument("--large-n", type=int, default=100_000,
                    help="truths suite: the extra, large n (100000)")
    ap.add_argument("--large-shapes", default="1x2x2",
                    help="truths suite: shapes HxNxD,... fitted at --large-n too (1x2x2)")
    ap.add_argument("--large-seeds", type=int, default=2,
                    help="truths suite: truths per large shape at --large-n (2; 0: none)")
    ap.add_argument("--gate-acts", default=None,
                    help="truths suite: only these groups, e.g. value:tanh,sdpa:gelu")
    ap.add_argument("--reps", type=int, default=4, help="data sets per n (preset suite)")
    ap.add_argument("--methods", default="lbfgs,trf,lm")
    ap.add_argument("--gates", default="none,value,sdpa")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--cert-tol", type=float, default=0.1,
                    help="certificate tolerance in units of sigma^2/n (0.1)")
    ap.add_argument("--quick", action="store_true",
                    help="2 groups, shape 1x2x2, n=1000, 1 seed: a smoke test")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--resume", action="store_true",
                    help="keep the cases already in --json (same methods and settings) and "
                         "fit only the missing ones")
    return ap.parse_args(argv)


def embed_truth(G, K):
    """``G*`` as a ``K``-channel measure: extra channels get weight 0 and zero experts."""
    import numpy as np

    from hmoe_estim.model import MixingMeasure

    H, N, Kt, D = G.shape
    omega = np.zeros((H, K))
    omega[:, :Kt] = G.omega
    a = np.zeros((H, N, K, D))
    a[:, :, :Kt] = G.a
    return MixingMeasure(omega, G.M.copy(), a)


def fit_trf(X, y, shape, gate, act, starts, lower, upper):
    """Best of ``scipy.optimize.least_squares(method='trf')`` from ``starts``."""
    import numpy as np
    from scipy.optimize import least_squares

    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.jacobian import jacobian_matrix
    from hmoe_estim.kernels.objective import predict

    H, N, K, D = shape
    g, a = GATE_CODES[gate], ACTIVATION_CODES[act]
    XT = np.require(X.T, requirements=["C", "W"])
    from threadpoolctl import threadpool_limits

    # one BLAS thread, as the estimator's solvers: idle BLAS threads spinning after each
    # SVD steal the cores of the Numba kernels (measured: 10-50x slower fits without)
    with threadpool_limits(limits=1, user_api="blas"):
        return _trf_starts(least_squares, predict, jacobian_matrix, XT, y, shape, g, a,
                           starts, lower, upper)


def _trf_starts(least_squares, predict, jacobian_matrix, XT, y, shape, g, a, starts, lower,
                upper):
    import numpy as np

    H, N, K, D = shape
    passes = 0
    best = None
    for t0 in starts:
        res = least_squares(
            lambda t: predict(t, XT, H, N, K, D, g, a) - y, t0,
            jac=lambda t: jacobian_matrix(t, XT, H, N, K, D, g, a),
            bounds=(lower, upper), method="trf",
        )
        passes += int(res.nfev) + int(res.njev or 0)
        obj = float(np.mean(res.fun ** 2))
        if best is None or obj < best[0]:
            best = (obj, bool(res.status > 0))
    return best[0], best[1], passes


def one_case(X, y, G, shape, gate, act, methods, noise, cert_tol, seed):
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.utils import check_random_state

    from hmoe_estim import HMoERegressor
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.jacobian import sum_of_squares
    from hmoe_estim.model import make_bounds, pack, random_start

    H, N, K, D = shape
    n = len(y)
    XT = np.require(X.T, requirements=["C", "W"])
    truth_obj = sum_of_squares(pack(embed_truth(G, K)), XT, y, H, N, K, D, GATE_CODES[gate],
                               ACTIVATION_CODES[act]) / n
    unit = noise ** 2 / n
    out = {"truth_objective": truth_obj, "methods": {}}
    for m in methods:
        t0 = time.perf_counter()
        if m == "trf":
            lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
            rng = check_random_state(seed)
            xr = float(np.sqrt(np.mean(X ** 2)))
            starts = [np.clip(pack(random_start(shape, rng, x_rms=xr, y_scale=float(np.std(y)))),
                              lower, upper) for _ in range(4)]
            obj, conv, passes = fit_trf(X, y, shape, gate, act, starts, lower, upper)
            agree = starts_below = None
        else:
            est = HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate=gate, activation=act,
                                solver=m, random_state=seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est.fit(X, y)
            obj, conv, passes = est.objective_, est.converged_, est.n_kernel_passes_
            agree = est.n_starts_agreeing_
            starts_below = int(np.sum(est.start_objectives_ <= truth_obj + cert_tol * unit))
        wall = time.perf_counter() - t0
        excess = (obj - truth_obj) / unit
        out["methods"][m] = {
            "objective": obj, "excess_sigma2_over_n": excess, "failure": bool(excess > cert_tol),
            "wall": wall, "passes": passes, "converged": bool(conv), "n_starts_agreeing": agree,
            "starts_not_above_truth": starts_below,
            "n_finished": None if m == "trf" else len(est.start_objectives_),
            "search_rounds": None if m == "trf" else int(est.search_rounds_),
        }
    return out


FULL_SHAPES = [(H, N, D) for H in (1, 2) for N in (2, 3) for D in (2, 3, 4)]
SMALL_SHAPES = [(1, 2, 2), (1, 2, 3)]


def parse_shapes(text):
    """``'full'``, ``'small'`` or ``'HxNxD,...'`` -> list of ``(H, N, D)``."""
    if text == "full":
        return list(FULL_SHAPES)
    if text == "small":
        return list(SMALL_SHAPES)
    shapes = []
    for item in (t for t in text.split(",") if t):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"--shapes: {item!r} is not HxNxD with positive integers "
                             "(e.g. 1x2x2); or use 'full' / 'small'")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def upper_bound(k, n, level=0.95):
    """One-sided Clopper–Pearson upper bound of a rate with ``k`` events in ``n`` trials."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def summarize(cases, methods, keys):
    import numpy as np

    groups = {}
    for c in cases:
        groups.setdefault(tuple(c[k] for k in keys), []).append(c)

    def cells(cs, m):
        rs = [c["result"]["methods"][m] for c in cs if m in c["result"]["methods"]]
        if not rs:
            return ["", "", "", "", ""]
        k = int(sum(r["failure"] for r in rs))
        return [f"{k}/{len(rs)}", f"{100 * k / len(rs):.1f}%",
                f"{100 * upper_bound(k, len(rs)):.1f}%",
                f"{np.median([r['wall'] for r in rs]):.2f}",
                f"{np.median([r['passes'] for r in rs]):.0f}"]

    rows = []
    for key, cs in sorted(groups.items(), key=lambda kv: [str(v) for v in kv[0]]):
        row = list(key) + [len(cs)]
        for m in methods:
            row += cells(cs, m)
        rows.append(row)
    totals = ["all"] + [""] * (len(keys) - 1) + [len(cases)]
    for m in methods:
        totals += cells(cases, m)
    rows.append(totals)
    header = list(keys) + ["fits"]
    for m in methods:
        header += [f"{m} fail", f"{m} rate", f"{m} 95% ub", f"{m} s", f"{m} passes"]
    return header, rows


def truths_plan(args, n_values, gates):
    """The truths suite: list of ``(gate, act, K, (H, N, D), truth_seed, data_seed, n, s)``.

    Ordered seed-major (seed, then ``n``, shape, group, ``K``), the large-``n`` cases last,
    so that an interrupted run has balanced groups.
    """
    groups = [(g, a) for g in gates for a in GATE_ACTS[g]]
    if args.gate_acts:
        want = {tuple(t.split(":")) for t in args.gate_acts.split(",") if t}
        groups = [ga for ga in groups if ga in want or (ga[0], "*") in want]
    first = args.first_seed
    shapes, seeds = parse_shapes(args.shapes), range(first, first + args.seeds)
    large = [] if args.large_seeds <= 0 else [
        (args.large_n, shp, range(first, first + args.large_seeds))
        for shp in parse_shapes(args.large_shapes)]
    if args.quick:
        groups, n_values, seeds, shapes, large = ([("value", "sigmoid"), ("sdpa", "tanh")],
                                                  [1000], range(1), [(1, 2, 2)], [])
    plan = []
    if args.shapes == "small" and not args.quick:
        # the earlier, narrower design (solver.json, solver_lm_12seeds.json): H = 1, N = 2,
        # D = 2 + seed mod 2, one truth per seed for every n and group, no large n
        for n in n_values:
            for gate, act in groups:
                for s in seeds:
                    for K in (2, 3):
                        plan.append((gate, act, K, (1, 2, 2 + s % 2), 1000 + s, 10_000 + s,
                                     n, s))
        return plan
    for s in seeds:
        for i_n, n in enumerate(n_values):
            for shp in shapes:
                for gate, act in groups:
                    for K in (2, 3):
                        plan.append((gate, act, K, shp, 1000 + 100 * i_n + s,
                                     10_000 + 100 * i_n + s, n, s))
    for n, shp, large_seeds in large:
        for s in large_seeds:
            for gate, act in groups:
                for K in (2, 3):
                    plan.append((gate, act, K, shp, 1900 + s, 19_000 + s, n, s))
    return plan


def _case_key(c):
    return (c["gate"], c["activation"], c["K"], c["H"], c["N"], c["D"], c["n"], c["seed"],
            c["truth_seed"], c["data_seed"])


def main(argv=None):
    args = parse_args(argv)
    limit_threads(args.threads)
    apply_runtime_limits(args.threads)

    from _common import environment, format_table

    from hmoe_estim import make_hmoe_regression, random_measure

    methods = [m for m in args.methods.split(",") if m]
    n_values = [int(float(v)) for v in args.n.split(",") if v]
    gates = [g for g in args.gates.split(",") if g]
    cases = []
    if args.suite == "tanh":
        if "trf" in methods:
            methods.remove("trf")
        # the hard case: D = 2, H = 1, N = 2, K* = 2, tanh, value gate, fitted with
        # the true K = 2 (identifiable), sigma = 0.05
        args.noise = 0.05
        plan = [("value", "tanh", 2, (1, 2, 2), 0, 10_000 + rep, n, rep)
                for n in n_values for rep in range(args.reps)]
    elif args.suite == "preset":
        if "trf" in methods:
            methods.remove("trf")
        # the quick preset's truth (presets/quick.toml: [truth] seed 0, scale 2)
        plan = [(gate, "sigmoid", 3, (1, 2, 3), 0, 10_000 + rep, n, rep)
                for n in n_values for gate in gates for rep in range(args.reps)]
    else:
        plan = truths_plan(args, n_values, gates)
    print(f"bench_solver: suite={args.suite}, {len(plan)} fits x methods {methods}, "
          f"threads={args.threads}", flush=True)
    keys = ["gate", "activation", "K"] if args.suite == "truths" else ["gate", "n"]
    meta = {"benchmark": "bench_solver", "suite": args.suite, "n": n_values,
            "methods": methods, "noise": args.noise, "cert_tol": args.cert_tol,
            "quick": args.quick, "K_true": 2}
    if args.suite == "truths":
        meta.update(shapes="1x2x2" if args.quick else args.shapes,
                    seeds=args.seeds, first_seed=args.first_seed, large_n=args.large_n,
                    large_shapes=args.large_shapes, large_seeds=args.large_seeds)

    env = environment()

    def dump(table=None, tables=None):
        if args.json:
            with open(args.json + ".tmp", "w") as fh:
                json.dump({**meta, "complete": table is not None, "cases": cases,
                           "table": table, "tables": tables, "environment": env},
                          fh, indent=1, default=float)
            os.replace(args.json + ".tmp", args.json)

    done = {}
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as fh:
            old = json.load(fh)
        same = all(old.get(k) == v for k, v in meta.items() if k != "total_seconds")
        if not same:
            raise SystemExit(f"--resume: {args.json} was written with other settings; "
                             "drop --resume or write to another file")
        done = {_case_key(c): c for c in old["cases"]}
        print(f"resuming: {len(done)} cases already in {args.json}", flush=True)

    t_start = time.perf_counter()
    for i, (gate, act, K, (H, N, D), truth_seed, data_seed, n, s) in enumerate(plan):
        key = (gate, act, K, H, N, D, n, s, truth_seed, data_seed)
        if key in done:
            cases.append(done[key])
            continue
        G = random_measure(H, N, 2, D, scale=2.0, random_state=truth_seed)
        X, y = make_hmoe_regression(n, measure=G, n_experts=2, n_features=D, gate=gate,
                                    activation=act, noise=args.noise, random_state=data_seed)
        res = one_case(X, y, G, (H, N, K, D), gate, act, methods, args.noise, args.cert_tol,
                       seed=s)
        cases.append({"gate": gate, "activation": act, "K": K, "K_true": 2, "H": H, "N": N,
                      "D": D, "n": n, "seed": s, "truth_seed": truth_seed,
                      "data_seed": data_seed, "result": res})
        line = "  ".join(f"{m}: {r['excess_sigma2_over_n']:+9.1f} {r['wall']:6.2f}s "
                         f"{r['passes']:5d}p{' FAIL' if r['failure'] else ''}"
                         for m, r in res["methods"].items())
        print(f"[{i + 1}/{len(plan)} {time.perf_counter() - t_start:5.0f}s] {gate:5s} "
              f"{act:7s} K={K} H={H} N={N} D={D} n={n:6d} seed={s}  {line}", flush=True)
        dump()
    if args.suite == "tanh":
        for m in methods:
            rs = [c["result"]["methods"][m] for c in cases]
            print(f"{m}: {sum(not r['failure'] for r in rs)} of {len(rs)} fits reach the truth's "
                  f"objective; starts: {sum(r['starts_not_above_truth'] for r in rs)} of "
                  f"{sum(r['n_finished'] for r in rs)} run to convergence")
    header, rows = summarize(cases, methods, keys)
    table = [header] + rows
    print()
    print(format_table(header, rows))
    tables = {"groups": table}
    if args.suite == "truths":
        for c in cases:
            c["shape"] = f"{c['H']}x{c['N']}x{c['D']}"
        h2, r2 = summarize(cases, methods, ["shape", "n"])
        print()
        print(format_table(h2, r2))
        tables["shapes"] = [h2] + r2
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    meta["total_seconds"] = time.perf_counter() - t_start
    if args.json:
        dump(table, tables)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
