"""Full multi-start L-BFGS-B fits: ``HMoERegressor`` against the same optimiser on peer gradients.

The problem is the built-in studies' configuration (``D = 3``, ``H* = 1``, ``N* = 2``, ``K* = 2``
fitted with
``K = 3``, sigmoid, ``σ = 0.1``, ``x ~ U[-1, 1]^3``, true entries of size ~2), one data set per
gate. The starting points are drawn once with :func:`hmoe_estim.model.random_start`
and given to every contender:

- ``hmoe``: ``HMoERegressor(init=starts, n_starts=len(starts)).fit(X, y)``, the whole estimator
  (validation, L-BFGS-B on the Numba kernel, ``unpack``);
- ``hmoe-scipy``: the Numba kernel in the loop below (the estimator's optimiser without the
  estimator, to separate its overhead);
- ``numpy``, ``torch``, ``jax``: the loop below with the peer's objective and gradient.

The loop is the estimator's: ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` from
``np.clip(pack(start), lower, upper)`` with the bounds of
:func:`hmoe_estim.model.make_bounds` and the options ``maxiter``, ``ftol = gtol = tol``,
``maxfun = max(15000, 3 maxiter)``, with the BLAS inside SciPy limited to one thread (as the
estimator does; the NumPy peer's own BLAS keeps its threads). Reported: wall time of all
starts, L-BFGS iterations and objective+gradient evaluations summed over starts, wall time
per evaluation, best final objective. Float round-off differs between implementations and
L-BFGS-B amplifies it on a non-convex loss, so the iteration counts and optima can differ
slightly between contenders; time per evaluation is the like-for-like figure.

Usage::

    python benchmarks/bench_fit.py                    # n = 1e4, 4 starts, all gates
    python benchmarks/bench_fit.py --n 100000 --json fit.json
    python benchmarks/bench_fit.py --quick
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, keep_freed_memory, limit_threads  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=10_000, help="samples (10000)")
    ap.add_argument("--starts", type=int, default=4, help="number of starts (4)")
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--gates", default="none,value,sdpa")
    ap.add_argument("--peers", default="numpy,torch,jax")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="n=2000, 2 starts, max_iter=100")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc's malloc settings alone (peers then page-fault on "
                         "every call; see _threads.keep_freed_memory)")
    ap.add_argument("--no-wait", action="store_true")
    return ap.parse_args(argv)


def _scipy_blas_single_thread():
    """Context: SciPy's own BLAS on one thread, every other library left alone.

    L-BFGS-B's linear algebra is tiny, and idle threads of a multi-threaded BLAS spin and take
    the cores of whatever computes the objective (the estimator limits BLAS the same way).
    Only the BLAS shipped inside SciPy is limited, so that the NumPy peer keeps its threads.
    """
    import contextlib

    @contextlib.contextmanager
    def ctx():
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            yield
            return
        libs = [c for c in ThreadpoolController().lib_controllers
                if c.user_api == "blas" and "scipy" in os.path.basename(
                    os.path.dirname(c.filepath))]
        saved = [c.num_threads for c in libs]
        for c in libs:
            c.set_num_threads(1)
        try:
            yield
        finally:
            for c, n in zip(libs, saved):
                c.set_num_threads(n)

    return ctx()


def scipy_fit(fg, starts, lower, upper, max_iter, tol):
    """The estimator's L-BFGS-B loop over ``starts``; returns a summary dict."""
    import numpy as np
    from scipy.optimize import minimize

    bounds = list(zip(lower, upper))
    per_start = []
    t0 = time.perf_counter()
    for theta0 in starts:
        nfev = [0]

        def fun(theta):
            nfev[0] += 1
            return fg(theta)

        with _scipy_blas_single_thread():
            res = minimize(fun, theta0, jac=True, method="L-BFGS-B", bounds=bounds,
                           options={"maxiter": max_iter, "ftol": tol, "gtol": tol,
                                    "maxfun": max(15000, 3 * max_iter)})
        per_start.append({"objective": float(res.fun), "n_iter": int(res.nit),
                          "nfev": nfev[0], "converged": bool(res.success)})
    wall = time.perf_counter() - t0
    objs = np.array([s["objective"] for s in per_start])
    return {
        "wall": wall,
        "n_iter": int(sum(s["n_iter"] for s in per_start)),
        "nfev": int(sum(s["nfev"] for s in per_start)),
        "best_objective": float(objs.min()),
        "start_objectives": objs.tolist(),
        "start_n_iter": [s["n_iter"] for s in per_start],
    }


def main(argv=None):
    args = parse_args(argv)
    if not args.default_malloc:
        keep_freed_memory([os.path.abspath(__file__)]
                          + (sys.argv[1:] if argv is None else list(argv)))
    if args.quick:
        args.n, args.starts, args.max_iter = 2000, 2, 100
    limit_threads(args.threads)

    import warnings

    import numpy as np
    import peers as P
    from _common import environment, format_table, wait_for_quiet

    available, skipped = P.available_peers(tuple(s for s in args.peers.split(",") if s))
    apply_runtime_limits(args.threads)

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.utils import check_random_state

    from hmoe_estim import HMoERegressor, make_hmoe_regression
    from hmoe_estim.model import make_bounds, pack, random_start

    H, N, K_true, K, D = 1, 2, 2, 3, 3
    shape = (H, N, K, D)
    omega_max, param_bound = 10.0, 10.0
    lower, upper = make_bounds(shape, omega_max=omega_max, param_bound=param_bound)

    print(f"bench_fit: n={args.n}, starts={args.starts}, max_iter={args.max_iter}, "
          f"tol={args.tol:g}, threads={args.threads}; fitted (H,N,K,D)={shape}, K*={K_true}; "
          f"peers {available}" + (f", skipped {skipped}" if skipped else ""))
    rows, out_cases = [], []
    for gate in [g for g in args.gates.split(",") if g]:
        X, y = make_hmoe_regression(args.n, n_heads=H, n_tokens=N, n_experts=K_true,
                                    n_features=D, gate=gate, activation="sigmoid", noise=0.1,
                                    random_state=args.seed)
        rng = check_random_state(args.seed + 1)
        x_rms = float(np.sqrt(np.mean(X ** 2)))
        y_scale = float(np.std(y))
        measures = [random_start(shape, rng, x_rms=x_rms, y_scale=y_scale,
                                 omega_max=omega_max, param_bound=param_bound)
                    for _ in range(args.starts)]
        starts = [np.clip(pack(m), lower, upper) for m in measures]
        results = {}
        if not args.no_wait:
            wait_for_quiet(max_wait=120)

        est = HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate=gate,
                            activation="sigmoid", n_starts=args.starts, max_iter=args.max_iter,
                            tol=args.tol, param_bound=param_bound, omega_max=omega_max,
                            init=measures)
        # warm the kernels (compile or load the cache) outside the timing
        P.make_peer("hmoe", X[:50], y[:50], shape, gate, "sigmoid")(starts[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            t0 = time.perf_counter()
            est.fit(X, y)
            wall = time.perf_counter() - t0
        results["hmoe"] = {
            "wall": wall, "n_iter": int(np.sum(est.start_n_iter_)), "nfev": None,
            "best_objective": float(est.objective_),
            "start_objectives": est.start_objectives_.tolist(),
            "start_n_iter": est.start_n_iter_.tolist(),
        }
        for name in ["hmoe"] + available:
            fg = P.make_peer(name, X, y, shape, gate, "sigmoid")
            fg(starts[0])  # compile / warm up outside the timing
            key = "hmoe-scipy" if name == "hmoe" else name
            results[key] = scipy_fit(fg, starts, lower, upper, args.max_iter, args.tol)
        ref = results["hmoe"]["wall"]
        for key, r in results.items():
            per_eval = r["wall"] / r["nfev"] if r["nfev"] else None
            rows.append([gate, key, f"{r['wall']:.2f}", f"{r['wall'] / ref:.2f}",
                         r["n_iter"], r["nfev"] if r["nfev"] else "-",
                         f"{per_eval * 1e3:.3f}" if per_eval else "-",
                         f"{r['best_objective']:.8f}"])
        out_cases.append({"gate": gate, "results": results})
        print(format_table(["gate", "impl", "wall s", "x hmoe", "iters", "evals", "ms/eval",
                            "best objective"], rows[-len(results):]), flush=True)
        print()

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"benchmark": "bench_fit", "n": args.n, "starts": args.starts,
                       "max_iter": args.max_iter, "tol": args.tol, "threads": args.threads,
                       "shape": list(shape), "K_true": K_true, "skipped": skipped,
                       "cases": out_cases, "environment": environment()}, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
