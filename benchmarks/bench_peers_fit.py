"""Fits side by side: the default search, L-BFGS-B, PyTorch's L-BFGS and SciPy trf, same data.

For each case (shape, gate, activation, ``n``) and each of ``--truths`` true measures
``G* = random_measure(H, N, K*, D, scale=2)`` (``K* = 2``, fitted with ``K = K*``; redrawn
with the next seed if the experts' separation cannot be reached), data
``make_hmoe_regression(n, measure=G*, noise=σ)`` with ``σ = --noise`` (0.05) are fitted, in
one process and on the same arrays, by

- ``lm``: ``HMoERegressor()`` with the case's shape, all else default (the
  Levenberg–Marquardt search);
- ``lbfgs``: ``HMoERegressor(solver="lbfgs")`` (multi-start L-BFGS-B);
- ``torch4``, ``torch32``: PyTorch ``torch.optim.LBFGS`` (``line_search_fn="strong_wolfe"``,
  float64, ``history_size=10``, at most ``max_iter=1000`` iterations per start,
  ``tolerance_grad = tolerance_change = 1e-9``: the package's ``MAX_ITER`` and ``TOL``) on the
  forward pass of :func:`peers.torch_loss`, gradient by autograd. **The box is enforced by a
  sigmoid reparametrisation** ``θ = lo + (hi − lo)·sigmoid(u)``: L-BFGS runs unconstrained
  on ``u``, started at ``u = logit((θ₀ − lo)/(hi − lo))``. The starts are the package's own
  random starts (:func:`hmoe_estim.model.random_start` scaled to the data as the estimator
  does, clipped into the box of :func:`hmoe_estim.model.make_bounds`, the estimator's default
  box ``0 <= ω <= 10``, ``|M|, |a| <= 10``), the best start is kept. PyTorch is run once per
  data set from 32 starts; ``torch4`` is the best of the *first 4* of them and its time the
  sum of their times (the same starts run alone give the same iterates);
- ``trf``: ``scipy.optimize.least_squares(method="trf")`` with the package's own Jacobian
  (:func:`hmoe_estim.kernels.jacobian.jacobian_matrix`, the explicit n × P matrix), the box as
  ``bounds``, from the first 4 of the same starts, best kept (``bench_solver.fit_trf``; SciPy's
  BLAS at one thread, as the estimator does).

Every method gets the same number of threads (``--threads``, default 2, via ``_threads.py``:
affinity, OpenMP/BLAS variables, ``numba.set_num_threads``, ``torch.set_num_threads``).

Certificate, as in ``bench_solver.py``: with ``K = K*`` the truth is a feasible point, so a
fit whose objective (mean squared residual) is above the truth's own objective on the same
data by more than ``--cert-tol`` (0.1) in units of ``σ²/n`` is a *certified optimisation
failure*. The depth of a fit is ``(objective − truth objective)·n/σ²`` (negative: below the
truth, the overfit of a converged least-squares fit; the truth's objective is ``σ̂²``, within
a few percent of ``σ²``). Reported per case and method: median wall time per fit, certified
failures / fits, median depth (σ²/n); for PyTorch also the number of starts (a prefix of the
32) and the median time PyTorch needs to match the default's failure count, and the median
time per data set to reach the default's own objective (within ``--cert-tol``), when reached
within 32 starts; the ratios of these times to the default's median.

Cases (``--cases``, comma-separated; the default runs the first four)::

    one-sigmoid      (H, N, K, D) = (1, 2, 2, 2), sdpa gate, sigmoid, n = 1e4
    one-tanh         (1, 2, 2, 2), sdpa, tanh, n = 1e4
    two-value        (2, 2, 2, 2), value gate, sigmoid, n = 1e4
    two-sdpa         (2, 2, 2, 2), sdpa, sigmoid, n = 1e4
    one-sigmoid-1e5  (1, 2, 2, 2), sdpa, sigmoid, n = 1e5

Without torch the PyTorch methods are reported as unavailable and skipped. Before each data
set the script waits (up to 2 minutes) for a quiet machine; the outside load during each fit
(cores used by other processes) is in the JSON and the table (``--no-wait`` skips the wait).
Numba's compilation is done on a small problem before anything is timed.

Usage::

    python benchmarks/bench_peers_fit.py --quick --no-wait            # smoke test
    python benchmarks/bench_peers_fit.py --json benchmarks/results/peers_fit.json
    python benchmarks/bench_peers_fit.py --cases one-sigmoid-1e5 --truths 2
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, keep_freed_memory, limit_threads  # noqa: E402

CASES = {
    "one-sigmoid": dict(shape=(1, 2, 2, 2), gate="sdpa", activation="sigmoid", n=10_000),
    "one-tanh": dict(shape=(1, 2, 2, 2), gate="sdpa", activation="tanh", n=10_000),
    "two-value": dict(shape=(2, 2, 2, 2), gate="value", activation="sigmoid", n=10_000),
    "two-sdpa": dict(shape=(2, 2, 2, 2), gate="sdpa", activation="sigmoid", n=10_000),
    "one-sigmoid-1e5": dict(shape=(1, 2, 2, 2), gate="sdpa", activation="sigmoid", n=100_000),
}
DEFAULT_CASES = "one-sigmoid,one-tanh,two-value,two-sdpa"
METHODS = ("lm", "lbfgs", "torch", "trf")
#: labels of the rows: the torch run gives two (the first 4 starts, all 32)
LABELS = {"lm": "default (LM search)", "lbfgs": "L-BFGS-B (solver='lbfgs')",
          "torch4": "PyTorch L-BFGS, 4 starts", "torch32": "PyTorch L-BFGS, 32 starts",
          "trf": "SciPy trf, 4 starts"}
TRF_STARTS = 4
BOX_NOTE = ("PyTorch: torch.optim.LBFGS (strong Wolfe, float64), box enforced by "
            "theta = lo + (hi - lo) * sigmoid(u)")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", default=DEFAULT_CASES,
                    help=f"comma-separated, from {', '.join(CASES)} ({DEFAULT_CASES})")
    ap.add_argument("--truths", type=int, default=3, help="true measures per case (3)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="truth t of a case uses seed first-seed + t (0)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated, from {', '.join(METHODS)} (all)")
    ap.add_argument("--torch-starts", type=int, default=32,
                    help="PyTorch starts per data set (32; the first 4 make torch4)")
    ap.add_argument("--noise", type=float, default=0.05)
    ap.add_argument("--cert-tol", type=float, default=0.1,
                    help="certificate tolerance in units of sigma^2/n (0.1)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: n = 600, 1 truth, 6 PyTorch starts of at most 50 "
                         "iterations, cases one-sigmoid and two-value unless --cases")
    ap.add_argument("--n", type=int, default=None, help="override every case's n")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    ap.add_argument("--max-wait", type=float, default=120.0,
                    help="seconds to wait at most for a quiet machine before a data set (120)")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc's malloc settings alone (see _threads.keep_freed_memory)")
    args = ap.parse_args(argv)
    args.case_names = [c for c in args.cases.split(",") if c]
    bad = [c for c in args.case_names if c not in CASES]
    if bad:
        ap.error(f"--cases: unknown {bad}; use {', '.join(CASES)}")
    args.method_names = [m for m in args.methods.split(",") if m]
    bad = [m for m in args.method_names if m not in METHODS]
    if bad:
        ap.error(f"--methods: unknown {bad}; use {', '.join(METHODS)}")
    args.torch_max_iter = 1000
    if args.quick:
        if args.cases == DEFAULT_CASES:
            args.case_names = ["one-sigmoid", "two-value"]
        args.truths, args.n = 1, args.n or 600
        args.torch_starts, args.torch_max_iter = 6, 50
    if args.torch_starts < 4:
        ap.error("--torch-starts must be >= 4")
    return args


# ----------------------------------------------------------------------------- the truths


def draw_truth(H, N, D, seed, max_redraws=99):
    """``random_measure(H, N, 2, D, scale=2)``, redrawn with the next seed if needed."""
    from hmoe_estim import random_measure

    for r in range(max_redraws + 1):
        try:
            return random_measure(H, N, 2, D, scale=2.0, random_state=seed + r), seed + r
        except ValueError as exc:
            if "Could not draw" not in str(exc) or r == max_redraws:
                raise
    raise AssertionError("unreachable")


def package_starts(shape, X, y, count, seed):
    """``count`` of the package's random starts (scaled to the data), clipped into the box."""
    import numpy as np
    from sklearn.utils import check_random_state

    from hmoe_estim.model import make_bounds, pack, random_start

    lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
    rng = check_random_state(seed)
    xr, ys = float(np.sqrt(np.mean(X ** 2))), float(np.std(y))
    starts = [np.clip(pack(random_start(shape, rng, x_rms=xr, y_scale=ys)), lower, upper)
              for _ in range(count)]
    return starts, lower, upper


# ----------------------------------------------------------------------------- the fitters


def fit_estimator(X, y, shape, gate, act, solver, seed):
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from hmoe_estim import HMoERegressor

    H, N, K, D = shape
    est = HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate=gate, activation=act,
                        solver=solver, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, y)
    return {"objective": float(est.objective_), "passes": int(est.n_kernel_passes_),
            "converged": bool(est.converged_)}


def torch_fit_starts(loss, starts, lower, upper, max_iter, tol=1e-9):
    """One ``torch.optim.LBFGS`` run per start, in ``u`` with ``θ = lo + (hi − lo)·σ(u)``.

    Returns one record per start: objective (the loss at the final ``θ``), wall and CPU time,
    iterations and loss evaluations.
    """
    import numpy as np
    import torch

    lo = torch.from_numpy(np.asarray(lower, dtype=np.float64))
    width = torch.from_numpy(np.asarray(upper, dtype=np.float64) - np.asarray(lower))
    out = []
    for t0 in starts:
        w0, c0 = time.perf_counter(), time.process_time()
        p = ((torch.from_numpy(np.asarray(t0, dtype=np.float64)) - lo) / width)
        u = torch.logit(p.clamp(1e-12, 1.0 - 1e-12)).detach().requires_grad_(True)
        opt = torch.optim.LBFGS([u], lr=1.0, max_iter=max_iter, history_size=10,
                                tolerance_grad=tol, tolerance_change=tol,
                                line_search_fn="strong_wolfe")
        evals = [0]

        def closure():
            opt.zero_grad()
            val = loss(lo + width * torch.sigmoid(u))
            val.backward()
            evals[0] += 1
            return val

        opt.step(closure)
        with torch.no_grad():
            obj = float(loss(lo + width * torch.sigmoid(u)))
        state = opt.state[opt._params[0]]
        out.append({"objective": obj if np.isfinite(obj) else float("inf"),
                    "wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                    "n_iter": int(state.get("n_iter", 0)), "n_evals": evals[0]})
    return out


# ----------------------------------------------------------------------------- one data set


def run_dataset(args, name, spec, t, methods, torch_ok):
    import numpy as np
    from _common import LoadMeter

    from hmoe_estim import make_hmoe_regression
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.jacobian import sum_of_squares
    from hmoe_estim.model import pack

    H, N, K, D = spec["shape"]
    n = args.n or spec["n"]
    gate, act = spec["gate"], spec["activation"]
    seed = args.first_seed + t
    G, truth_seed = draw_truth(H, N, D, 1000 + seed)
    data_seed, fit_seed = 10_000 + seed, seed
    X, y = make_hmoe_regression(n, measure=G, gate=gate, activation=act, noise=args.noise,
                                random_state=data_seed)
    XT = np.require(X.T, requirements=["C", "W"])
    truth_obj = float(sum_of_squares(pack(G), XT, y, H, N, K, D, GATE_CODES[gate],
                                     ACTIVATION_CODES[act]) / n)
    unit = args.noise ** 2 / n
    rec = {"case": name, "truth": t, "shape": [H, N, K, D], "gate": gate, "activation": act,
           "n": n, "truth_seed": truth_seed, "data_seed": data_seed, "fit_seed": fit_seed,
           "truth_objective": truth_obj, "methods": {}}

    def record(m, r, wall, cpu, load):
        r.update(wall=wall, cpu=cpu, load=load,
                 excess_sigma2_over_n=(r["objective"] - truth_obj) / unit)
        r["failure"] = bool(r["excess_sigma2_over_n"] > args.cert_tol)
        rec["methods"][m] = r

    n_starts = max(args.torch_starts if "torch" in methods and torch_ok else 0, TRF_STARTS)
    starts, lower, upper = package_starts((H, N, K, D), X, y, n_starts, fit_seed)
    for m in methods:
        if m == "torch" and not torch_ok:
            continue
        time.sleep(0.15)  # let the previous library's idle threads go to sleep
        meter = LoadMeter().start()
        w0, c0 = time.perf_counter(), time.process_time()
        if m in ("lm", "lbfgs"):
            r = fit_estimator(X, y, (H, N, K, D), gate, act, m, fit_seed)
        elif m == "trf":
            from bench_solver import fit_trf

            obj, conv, passes = fit_trf(X, y, (H, N, K, D), gate, act, starts[:TRF_STARTS],
                                        lower, upper)
            r = {"objective": float(obj), "passes": int(passes), "converged": bool(conv)}
        else:
            import peers
            import torch

            loss = peers.torch_loss(X, y, (H, N, K, D), gate, act)
            loss(torch.from_numpy(starts[0]))  # wake torch's thread pool (untimed)
            w0, c0 = time.perf_counter(), time.process_time()
            per_start = torch_fit_starts(loss, starts[:args.torch_starts], lower, upper,
                                         args.torch_max_iter)
        wall, cpu, load = time.perf_counter() - w0, time.process_time() - c0, meter.stop()
        if m != "torch":
            record(m, r, wall, cpu, load)
            continue
        objs = np.array([s["objective"] for s in per_start])
        for label, k in (("torch4", 4), (f"torch{args.torch_starts}", args.torch_starts)):
            first = per_start[:k]
            record(label, {"objective": float(objs[:k].min()), "n_starts": k,
                           "passes": int(sum(s["n_evals"] for s in first))},
                   float(sum(s["wall"] for s in first)), float(sum(s["cpu"] for s in first)),
                   load)
        rec["torch_starts"] = [{**s, "excess_sigma2_over_n": (s["objective"] - truth_obj)
                                / unit} for s in per_start]
    return rec


# ----------------------------------------------------------------------------- the report


def _prefix_best(rec, k):
    """Best excess (σ²/n) of the first ``k`` PyTorch starts of a data set."""
    return min(s["excess_sigma2_over_n"] for s in rec["torch_starts"][:k])


def _prefix_time(rec, k):
    return sum(s["wall"] for s in rec["torch_starts"][:k])


def summarize(records, cert_tol, torch_starts):
    """Per case: rows per method and the PyTorch match figures (a JSON-able dict)."""
    import numpy as np

    out = {}
    for name in dict.fromkeys(r["case"] for r in records):
        recs = [r for r in records if r["case"] == name]
        rows = {}
        for label in ["lm", "lbfgs", "torch4", f"torch{torch_starts}", "trf"]:
            rs = [r["methods"][label] for r in recs if label in r["methods"]]
            if not rs:
                continue
            rows[label] = {
                "fits": len(rs), "failures": int(sum(x["failure"] for x in rs)),
                "median_wall": float(np.median([x["wall"] for x in rs])),
                "median_cpu": float(np.median([x["cpu"] for x in rs])),
                "min_wall": float(np.min([x["wall"] for x in rs])),
                "max_wall": float(np.max([x["wall"] for x in rs])),
                "median_excess": float(np.median([x["excess_sigma2_over_n"] for x in rs])),
                "max_load": max((x["load"] or 0.0) for x in rs),
            }
        entry = {"rows": rows}
        with_torch = [r for r in recs if "torch_starts" in r]
        if "lm" in rows and with_torch and len(with_torch) == len(recs):
            lm_fail, lm_wall = rows["lm"]["failures"], rows["lm"]["median_wall"]
            # the fewest starts (a prefix, the same for every data set) at which PyTorch has
            # no more certified failures than the default
            k_fail = None
            for k in range(1, torch_starts + 1):
                fails = sum(_prefix_best(r, k) > cert_tol for r in recs)
                if fails <= lm_fail:
                    k_fail = k
                    break
            match = {"default_failures": lm_fail, "starts_to_match_failures": k_fail,
                     "median_wall_to_match_failures": None, "ratio_to_default": None}
            if k_fail is not None:
                t = float(np.median([_prefix_time(r, k_fail) for r in recs]))
                match.update(median_wall_to_match_failures=t, ratio_to_default=t / lm_wall)
            # per data set: the fewest starts at which PyTorch reaches the default's objective
            ks, times = [], []
            for r in recs:
                target = r["methods"]["lm"]["excess_sigma2_over_n"] + cert_tol
                k = next((k for k in range(1, len(r["torch_starts"]) + 1)
                          if _prefix_best(r, k) <= target), None)
                ks.append(k)
                times.append(None if k is None else _prefix_time(r, k))
            reached = [x for x in times if x is not None]
            match.update(
                starts_to_reach_default_objective=ks,
                reached_default_objective=len(reached),
                median_wall_to_reach_default_objective=(
                    float(np.median(reached)) if len(reached) == len(times) else None))
            if match["median_wall_to_reach_default_objective"] is not None:
                match["objective_ratio_to_default"] = (
                    match["median_wall_to_reach_default_objective"] / lm_wall)
            entry["torch_match"] = match
        out[name] = entry
    return out


def print_report(summary, torch_starts, format_table):
    header = ["case", "method", "failures", "median s", "min-max s", "median cpu s",
              "median σ²/n vs truth", "max load"]
    rows = []
    for name, entry in summary.items():
        for label, r in entry["rows"].items():
            rows.append([name, LABELS.get(label, f"PyTorch L-BFGS, {torch_starts} starts"),
                         f"{r['failures']}/{r['fits']}", f"{r['median_wall']:.2f}",
                         f"{r['min_wall']:.2f}-{r['max_wall']:.2f}", f"{r['median_cpu']:.2f}",
                         f"{r['median_excess']:+.1f}", f"{r['max_load']:.2f}"])
    print(format_table(header, rows))
    lines = []
    for name, entry in summary.items():
        m = entry.get("torch_match")
        if m is None:
            continue
        if m["starts_to_match_failures"] is None:
            a = (f"not reached in {torch_starts} starts (default: "
                 f"{m['default_failures']} failures)")
        else:
            a = (f"{m['starts_to_match_failures']} starts, {m['median_wall_to_match_failures']:.2f}"
                 f" s = {m['ratio_to_default']:.1f}x the default")
        t = m["median_wall_to_reach_default_objective"]
        b = (f"{t:.2f} s = {m['objective_ratio_to_default']:.1f}x the default" if t is not None
             else f"reached on {m['reached_default_objective']} of "
                  f"{len(m['starts_to_reach_default_objective'])} data sets in {torch_starts} "
                  "starts")
        lines.append(f"  {name}: to match the default's failure count: {a}; to reach the "
                     f"default's objective (median per data set): {b} "
                     f"(starts: {m['starts_to_reach_default_objective']})")
    if lines:
        print("\nPyTorch L-BFGS against the default:")
        print("\n".join(lines))


# ----------------------------------------------------------------------------- main


def warm_up(specs, methods, torch_ok):
    """Compile the Numba kernels of every (gate, activation) before anything is timed."""
    from hmoe_estim import make_hmoe_regression

    for spec in specs:
        H, N, K, D = spec["shape"]
        G, _ = draw_truth(H, N, D, 0)
        X, y = make_hmoe_regression(200, measure=G, gate=spec["gate"],
                                    activation=spec["activation"], noise=0.05, random_state=0)
        for m in methods:
            if m in ("lm", "lbfgs"):
                fit_estimator(X, y, (H, N, K, D), spec["gate"], spec["activation"], m, 0)
            elif m == "trf":
                from bench_solver import fit_trf

                starts, lo, hi = package_starts((H, N, K, D), X, y, 1, 0)
                fit_trf(X, y, (H, N, K, D), spec["gate"], spec["activation"], starts, lo, hi)
            elif m == "torch" and torch_ok:
                # the first LBFGS step imports and initialises parts of torch (seconds)
                import peers

                loss = peers.torch_loss(X, y, (H, N, K, D), spec["gate"], spec["activation"])
                starts, lo, hi = package_starts((H, N, K, D), X, y, 1, 0)
                torch_fit_starts(loss, starts, lo, hi, 5)


def main(argv=None):
    args = parse_args(argv)
    if not args.default_malloc:
        keep_freed_memory([os.path.abspath(__file__)]
                          + (sys.argv[1:] if argv is None else list(argv)))
    limit_threads(args.threads)

    import peers
    from _common import environment, format_table, wait_for_quiet

    ok, skipped = peers.available_peers(("torch",))
    torch_ok = "torch" in ok
    apply_runtime_limits(args.threads)
    methods = args.method_names
    unavailable = {}
    if "torch" in methods and not torch_ok:
        unavailable["torch"] = skipped["torch"]
        print(f"PyTorch unavailable, torch4/torch{args.torch_starts} skipped: "
              f"{skipped['torch']}", flush=True)
    import hmoe_estim

    env = environment()
    print(f"bench_peers_fit: cases {args.case_names}, {args.truths} truth(s) each, methods "
          f"{methods}, threads={args.threads}, sigma={args.noise}", flush=True)
    print(f"CPU: {env['cpu']} ({env['cpu_count']} logical CPUs; affinity "
          f"{env['threads']['affinity']}); hmoe_estim from {hmoe_estim.__file__}", flush=True)
    if "torch" in methods and torch_ok:
        print(BOX_NOTE, flush=True)
    specs = [CASES[c] for c in args.case_names]
    t0 = time.perf_counter()
    warm_up(specs, methods, torch_ok)
    print(f"warm-up (Numba compilation) {time.perf_counter() - t0:.1f} s", flush=True)

    meta = {"benchmark": "bench_peers_fit", "cases": args.case_names, "truths": args.truths,
            "first_seed": args.first_seed, "methods": methods, "noise": args.noise,
            "cert_tol": args.cert_tol, "threads": args.threads, "quick": args.quick,
            "n_override": args.n, "torch_starts": args.torch_starts,
            "torch_max_iter": args.torch_max_iter, "trf_starts": TRF_STARTS,
            "torch_box": "theta = lo + (hi - lo) * sigmoid(u); LBFGS on u",
            "torch_options": {"line_search_fn": "strong_wolfe", "dtype": "float64",
                              "history_size": 10, "max_iter": args.torch_max_iter,
                              "tolerance_grad": 1e-9, "tolerance_change": 1e-9},
            "unavailable": unavailable, "labels": LABELS}
    records = []
    t_start = time.perf_counter()
    for name, spec in zip(args.case_names, specs):
        for t in range(args.truths):
            if not args.no_wait:
                wait_for_quiet(max_wait=args.max_wait)
            rec = run_dataset(args, name, spec, t, methods, torch_ok)
            records.append(rec)
            line = "  ".join(f"{m}: {r['excess_sigma2_over_n']:+7.1f} {r['wall']:6.2f}s"
                             f"{' FAIL' if r['failure'] else ''}"
                             for m, r in rec["methods"].items())
            print(f"[{time.perf_counter() - t_start:5.0f}s] {name} truth {t}: {line}",
                  flush=True)
    summary = summarize(records, args.cert_tol, args.torch_starts)
    print(f"\nCPU: {env['cpu']}, {args.threads} threads for every method; n = "
          f"{sorted({r['n'] for r in records})}; sigma = {args.noise}; failures: objective above "
          f"the truth's by > {args.cert_tol} sigma^2/n")
    if "torch" in methods and torch_ok:
        print(BOX_NOTE + f"; 4 starts = the first 4 of {args.torch_starts}")
    print()
    print_report(summary, args.torch_starts, format_table)
    total = time.perf_counter() - t_start
    print(f"\ntotal {total:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**meta, "summary": summary, "records": records, "environment": env,
                       "total_seconds": total}, fh, indent=1, default=float)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
