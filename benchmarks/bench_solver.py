"""Solver benchmark: certified failures, wall time and kernel passes of three fitting methods.

A suite of known truths ``G*`` (``H* = 1``, ``N* = 2``, ``K* = 2``, ``D`` in {2, 3}; gates
none/value/sdpa × activations sigmoid/tanh/gelu/silu — one activation for the ungated MHA,
which has none; fitted with ``K = K*`` and ``K = K* + 1``; several seeds; ``n`` on a grid),
each fitted by

- ``lbfgs``: ``HMoERegressor(solver="lbfgs")`` — 4 random L-BFGS-B starts (the earlier
  default);
- ``trf``: ``scipy.optimize.least_squares(method="trf")`` from the same 4 starts, with the
  explicit n × P Jacobian of :func:`hmoe_estim.kernels.jacobian.jacobian_matrix` (the same
  derivatives as the fused kernel) and the same box; best of the 4;
- ``lm``: ``HMoERegressor()`` with the new defaults (``solver="lm"``, racing).

Certificate: with ``K >= K*`` the truth is feasible (for ``K = K* + 1`` embedded with an extra
zero-weight channel), so a fit whose objective exceeds the truth's objective by more than
``--cert-tol`` (in units of ``σ²/n``) is a *certified optimisation failure*. Reported per
(gate, activation, K) group: failure rate, median wall time per fit, median kernel passes per
fit (objective+gradient evaluations for L-BFGS-B; Jacobian + forward passes for LM and trf,
abandoned race candidates included).

``--suite tanh`` fits the hard case ``D = 2``, ``K = K* = 2``, tanh, value gate, ``σ = 0.05``
(use ``--n 20000``) with ``lbfgs`` and ``lm``, and counts the starts that reach the truth's
objective. ``--suite preset`` instead fits the quick preset's configuration (``D = 3``, ``K* = 2``
fitted
with ``K = 3``, sigmoid, ``σ = 0.1``, gates none/value/sdpa, the preset's truth) with
``lbfgs`` and ``lm`` over replications of the data, at the ``--n`` values.

Usage::

    python benchmarks/bench_solver.py --quick                     # smoke test
    python benchmarks/bench_solver.py --json benchmarks/results/solver.json
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
    ap.add_argument("--seeds", type=int, default=3, help="truths per group (truths suite)")
    ap.add_argument("--reps", type=int, default=4, help="data sets per n (preset suite)")
    ap.add_argument("--methods", default="lbfgs,trf,lm")
    ap.add_argument("--gates", default="none,value,sdpa")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--cert-tol", type=float, default=0.1,
                    help="certificate tolerance in units of sigma^2/n (0.1)")
    ap.add_argument("--quick", action="store_true",
                    help="2 groups, n=1000, 1 seed: a smoke test")
    ap.add_argument("--json", metavar="PATH")
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
    from hmoe_estim.initialization import random_start
    from hmoe_estim.kernels.jacobian import sum_of_squares
    from hmoe_estim.model import make_bounds, pack

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
        }
    return out


def summarize(cases, methods, keys):
    import numpy as np

    groups = {}
    for c in cases:
        groups.setdefault(tuple(c[k] for k in keys), []).append(c)
    rows = []
    for key, cs in sorted(groups.items(), key=lambda kv: str(kv[0])):
        row = list(key) + [len(cs)]
        for m in methods:
            rs = [c["result"]["methods"][m] for c in cs if m in c["result"]["methods"]]
            fail = np.mean([r["failure"] for r in rs])
            row += [f"{100 * fail:.0f}%", f"{np.median([r['wall'] for r in rs]):.2f}",
                    f"{np.median([r['passes'] for r in rs]):.0f}"]
        rows.append(row)
    totals = ["all"] + [""] * (len(keys) - 1) + [len(cases)]
    for m in methods:
        rs = [c["result"]["methods"][m] for c in cases if m in c["result"]["methods"]]
        totals += [f"{100 * np.mean([r['failure'] for r in rs]):.1f}%",
                   f"{np.median([r['wall'] for r in rs]):.2f}",
                   f"{np.median([r['passes'] for r in rs]):.0f}"]
    rows.append(totals)
    header = list(keys) + ["fits"]
    for m in methods:
        header += [f"{m} fail", f"{m} s", f"{m} passes"]
    return header, rows


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
        G = random_measure(1, 2, 2, 2, scale=2.0, random_state=0)
        plan = [("value", "tanh", 2, 2, G, n, rep) for n in n_values for rep in range(args.reps)]
    elif args.suite == "preset":
        if "trf" in methods:
            methods.remove("trf")
        # the quick preset's truth (presets/quick.toml: [truth] seed 0, scale 2)
        G = random_measure(1, 2, 2, 3, scale=2.0, random_state=0)
        plan = [(gate, "sigmoid", 3, 3, G, n, rep) for n in n_values for gate in gates
                for rep in range(args.reps)]
    else:
        plan = []
        groups = [(g, a) for g in gates for a in GATE_ACTS[g]]
        seeds = args.seeds
        if args.quick:
            groups, n_values, seeds = [("value", "sigmoid"), ("sdpa", "tanh")], [1000], 1
        for n in n_values:
            for gate, act in groups:
                for s in range(seeds):
                    D = 2 + s % 2
                    G = random_measure(1, 2, 2, D, scale=2.0, random_state=1000 + s)
                    for K in (2, 3):
                        plan.append((gate, act, K, D, G, n, s))
    print(f"bench_solver: suite={args.suite}, {len(plan)} fits x methods {methods}, "
          f"threads={args.threads}", flush=True)
    t_start = time.perf_counter()
    for gate, act, K, D, G, n, s in plan:
        X, y = make_hmoe_regression(n, measure=G, n_experts=2, n_features=D, gate=gate,
                                    activation=act, noise=args.noise, random_state=10_000 + s)
        res = one_case(X, y, G, (1, 2, K, D), gate, act, methods, args.noise, args.cert_tol,
                       seed=s)
        cases.append({"gate": gate, "activation": act, "K": K, "K_true": 2, "D": D, "n": n,
                      "seed": s, "result": res})
        line = "  ".join(f"{m}: {r['excess_sigma2_over_n']:+9.1f} {r['wall']:6.2f}s "
                         f"{r['passes']:5d}p" for m, r in res["methods"].items())
        print(f"{gate:5s} {act:7s} K={K} D={D} n={n:6d} seed={s}  {line}", flush=True)
    keys = ["gate", "activation", "K"] if args.suite == "truths" else ["gate", "n"]
    if args.suite == "tanh":
        for m in methods:
            rs = [c["result"]["methods"][m] for c in cases]
            print(f"{m}: {sum(not r['failure'] for r in rs)} of {len(rs)} fits reach the truth's "
                  f"objective; starts: {sum(r['starts_not_above_truth'] for r in rs)} of "
                  f"{sum(r['n_finished'] for r in rs)} run to convergence")
    header, rows = summarize(cases, methods, keys)
    print()
    print(format_table(header, rows))
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"benchmark": "bench_solver", "suite": args.suite, "n": n_values,
                       "methods": methods, "noise": args.noise, "cert_tol": args.cert_tol,
                       "quick": args.quick, "cases": cases, "table": [header] + rows,
                       "environment": environment()}, fh, indent=1, default=float)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
