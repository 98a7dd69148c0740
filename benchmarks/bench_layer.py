"""Whole-layer fits side by side: ``AttentionLayerRegressor`` and PyTorch autograd + L-BFGS.

Grid (defaults): heads ``H`` in {1, 2} (``--heads``), tokens ``N`` in {2, 4} (``--tokens``),
token dimension ``d`` in {2, 4} (``--dims``), head width ``d_v = min(2, d)``, ``d_out = d``,
gates none/value/sdpa (``--gates``; φ = ``--activation``, sigmoid), noise ``σ = 0.1``
(``--noise``), ``n = 2000`` token matrices (``--n``). Each case has ``--reps`` replications
(3), each with a fresh truth ``random_attention_layer(H, d, d_v, scale=--scale,
random_state=1000 + seed)`` and data ``make_attention_regression(n, truth, n_tokens=N,
noise=σ, random_state=10000 + seed)``, ``seed = --first-seed + replication``. On the same
arrays, in one process:

- ``estimator``: ``AttentionLayerRegressor(n_heads=H, head_dim=d_v, gate=..., activation=...,
  random_state=seed)``, everything else default (its Levenberg–Marquardt search);
- ``torch``: the same layer as a PyTorch module (:func:`hmoe_estim.layer.layer_to_torch`),
  loss ``mean((module(X) − Y)²)`` with the gradient by autograd, minimised by
  ``torch.optim.LBFGS`` (``line_search_fn="strong_wolfe"``, float64, ``history_size=10``, at
  most 1000 iterations per start, ``tolerance_grad = tolerance_change = 1e-9``) from 4 random
  starts (``--torch-starts``), the best kept. The starts are draws of the estimator's own
  start distribution (``LayerProblem.random_start``: ``random_attention_layer`` weights
  scaled to the data, clipped into the box), seeded by ``seed``. **The box** ``[-10, 10]`` of
  every weight (the estimator's) **is enforced by a sigmoid reparametrisation**
  ``θ = lo + (hi − lo)·sigmoid(u) = 10·tanh(u/2)``: L-BFGS runs unconstrained on ``u``
  (``bench_peers_fit.torch_fit_starts``, shared with that benchmark).

Both get the same number of threads (``--threads``, default 2, via ``_threads.py``: CPU
affinity, OpenMP/BLAS variables, ``numba.set_num_threads`` and ``torch.set_num_threads``).

Certificate, as in ``bench_solver.py`` and ``bench_peers_fit.py``: the truth is a feasible
point of the fitted class, so a fit whose objective (mean squared residual over the
``m = n·N·d_out`` residuals) is above the truth's own objective on the same data by more than
``--cert-tol`` (0.1) in units of ``σ²/m`` is a *certified optimisation failure*. Reported per
case (H, N, d, gate) and method: median seconds per fit, median ``(objective − truth
objective)·m/σ²`` (negative: below the truth, the overfit of a least-squares fit), certified
failures / fits, the outside load; the ratio of the median times PyTorch / estimator; and
in how many fits the estimator's objective is at or below PyTorch's on the same data (within
``--cert-tol`` σ²/m: "equal or better"). A
last row gives the totals and the geometric mean of the ratios. Printed as a table and
written with every fit to ``--json``.

Before timing, the PyTorch loss and its autograd gradient are checked against the layer fit's
objective and analytic gradient (relative 1e-10; exit status 2 if not). Without torch the
PyTorch method is reported as unavailable and skipped. Before each data set
the script waits (up to 2 minutes) for a quiet machine (``--no-wait`` skips the wait). Numba's
compilation and PyTorch's first LBFGS step are done on a small problem before anything is
timed.

Usage::

    python benchmarks/bench_layer.py --quick --no-wait                 # a tiny run
    python benchmarks/bench_layer.py --json benchmarks/results/layer_fit.json
    python benchmarks/bench_layer.py --gates sdpa --heads 2 --reps 5 --threads 1
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, keep_freed_memory, limit_threads  # noqa: E402

GATES = ("none", "value", "sdpa")
METHODS = ("estimator", "torch")
LABELS = {"estimator": "AttentionLayerRegressor", "torch": "PyTorch L-BFGS"}
BOX_NOTE = ("PyTorch: torch.optim.LBFGS (strong Wolfe, float64) on the layer module's autograd "
            "gradient, box [-10, 10] enforced by theta = lo + (hi - lo) * sigmoid(u) "
            "= 10 tanh(u/2)")


def _ints(text, name, ap):
    try:
        vals = [int(v) for v in text.split(",") if v]
    except ValueError:
        ap.error(f"--{name}: {text!r} is not a comma-separated list of integers")
    if not vals or min(vals) < 1:
        ap.error(f"--{name}: give positive integers")
    return vals


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heads", default="1,2", help="values of H (1,2)")
    ap.add_argument("--tokens", default="2,4", help="values of N (2,4)")
    ap.add_argument("--dims", default="2,4", help="values of d (2,4); d_v = min(2, d)")
    ap.add_argument("--gates", default=",".join(GATES), help="from none,value,sdpa (all)")
    ap.add_argument("--activation", default="sigmoid", help="φ of the gated layers (sigmoid)")
    ap.add_argument("--n", type=int, default=2000, help="token matrices per data set (2000)")
    ap.add_argument("--reps", type=int, default=3,
                    help="replications per case, each a fresh truth and data set (3)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="replication r uses seed first-seed + r (0)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="scale of random_attention_layer for the truths (1.0)")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--cert-tol", type=float, default=0.1,
                    help="certificate tolerance in units of sigma^2/m (0.1)")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help=f"comma-separated, from {', '.join(METHODS)} (all)")
    ap.add_argument("--torch-starts", type=int, default=4, help="PyTorch starts per fit (4)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: H = 1, N = 2, d = 2, gate none, n = 300, 1 replication, "
                         "PyTorch starts of at most 50 iterations (unless given otherwise)")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="skip the untimed warm-up (the first fit's time then includes Numba's "
                         "compilation or cache loading)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--rst", metavar="PATH",
                    help="also write the summary as a reStructuredText table (the docs' table)")
    ap.add_argument("--from-json", metavar="PATH",
                    help="fit nothing: write --rst from the summary of an earlier --json")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    ap.add_argument("--max-wait", type=float, default=120.0,
                    help="seconds to wait at most for a quiet machine before a data set (120)")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc's malloc settings alone (see _threads.keep_freed_memory)")
    given = set(a.split("=")[0] for a in (sys.argv[1:] if argv is None else argv))
    args = ap.parse_args(argv)
    args.torch_max_iter = 1000
    if args.quick:
        for opt, attr, value in (("--heads", "heads", "1"), ("--tokens", "tokens", "2"),
                                 ("--dims", "dims", "2"), ("--gates", "gates", "none"),
                                 ("--n", "n", 300), ("--reps", "reps", 1)):
            if opt not in given:
                setattr(args, attr, value)
        args.torch_max_iter = 50
    args.H, args.N, args.d = (_ints(args.heads, "heads", ap), _ints(args.tokens, "tokens", ap),
                              _ints(args.dims, "dims", ap))
    args.gate_names = [g for g in args.gates.split(",") if g]
    bad = [g for g in args.gate_names if g not in GATES]
    if bad or not args.gate_names:
        ap.error(f"--gates: unknown {bad}; use {', '.join(GATES)}")
    args.method_names = [m for m in args.methods.split(",") if m]
    bad = [m for m in args.method_names if m not in METHODS]
    if bad or not args.method_names:
        ap.error(f"--methods: unknown {bad}; use {', '.join(METHODS)}")
    if args.n < 2 or args.reps < 1 or args.torch_starts < 1 or args.noise <= 0:
        ap.error("--n >= 2, --reps >= 1, --torch-starts >= 1 and --noise > 0 are needed")
    return args


def plan(args):
    """Cases ``(H, N, d, gate)``, heads-major, the gates innermost."""
    return [(H, N, d, g) for H in args.H for N in args.N for d in args.d
            for g in args.gate_names]


# ----------------------------------------------------------------------------- the fitters


def make_estimator(H, dv, gate, act, seed):
    from hmoe_estim.layer import AttentionLayerRegressor

    return AttentionLayerRegressor(n_heads=H, head_dim=dv, gate=gate, activation=act,
                                   random_state=seed)


def fit_estimator(X, Y, H, dv, gate, act, seed):
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning

    est = make_estimator(H, dv, gate, act, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est.fit(X, Y)
    r = est.predict(X) - Y
    return {"objective": float(est.objective_), "objective_of_predict": float(np.mean(r * r)),
            "passes": int(est.n_kernel_passes_), "converged": bool(est.converged_),
            "search_rounds": int(est.search_rounds_)}


def estimator_starts(X, Y, H, dv, gate, act, count, seed):
    """``count`` draws of the estimator's start distribution, and its box."""
    from sklearn.utils import check_random_state

    from hmoe_estim._defaults import PARAM_BOUND
    from hmoe_estim.layer import LayerProblem

    est = make_estimator(H, dv, gate, act, seed)
    layout = est._layout(X.shape[2], Y.shape[-1])
    lower, upper = LayerProblem.default_box(layout, PARAM_BOUND)
    problem = LayerProblem(X, Y, layout, gate, act, lower, upper, gate_form="activation")
    rng = check_random_state(seed)  # the fit's own start distribution, in the data's units
    return [problem.random_start(rng) for _ in range(count)], lower, upper, layout


def torch_loss(X, Y, layout, gate, act):
    """``loss(theta) = mean((f_theta(X) − Y)²)`` by the layer's torch module, ``theta`` the
    packed vector (the module's parameters in order)."""
    import numpy as np
    import torch

    from hmoe_estim.layer import layer_to_torch

    module = layer_to_torch(layout.unpack(np.zeros(layout.n_params)), gate=gate,
                            activation=act)
    named = list(module.named_parameters())
    names = [nm for nm, _ in named]
    shapes = [p.shape for _, p in named]
    sizes = [p.numel() for _, p in named]
    Xt, Yt = torch.from_numpy(X), torch.from_numpy(Y)

    def loss(theta):
        params = {nm: t.reshape(s) for nm, t, s in zip(names, torch.split(theta, sizes), shapes)}
        r = torch.func.functional_call(module, params, (Xt,)) - Yt
        return (r * r).mean()

    return loss


# ----------------------------------------------------------------------------- one data set


def run_dataset(args, case, rep, methods, torch_ok):
    import numpy as np
    from _common import LoadMeter

    from hmoe_estim.layer import (
        attention_layer_output,
        make_attention_regression,
        random_attention_layer,
    )

    H, N, d, gate = case
    dv, act = min(2, d), args.activation
    seed = args.first_seed + rep
    truth_seed, data_seed = 1000 + seed, 10_000 + seed
    truth = random_attention_layer(H, d, dv, scale=args.scale, random_state=truth_seed)
    X, Y = make_attention_regression(args.n, truth, n_tokens=N, gate=gate, activation=act,
                                     noise=args.noise, random_state=data_seed)
    r = attention_layer_output(X, truth, gate=gate, activation=act) - Y
    truth_obj = float(np.mean(r * r))
    m = Y.size
    unit = args.noise ** 2 / m
    rec = {"H": H, "N": N, "d": d, "d_v": dv, "d_out": d, "gate": gate, "activation": act,
           "n": args.n, "m": m, "rep": rep, "seed": seed, "truth_seed": truth_seed,
           "data_seed": data_seed, "truth_objective": truth_obj, "methods": {}}

    def record(name, res, wall, cpu, load):
        res.update(wall=wall, cpu=cpu, load=load,
                   excess_sigma2_over_m=(res["objective"] - truth_obj) / unit)
        res["failure"] = bool(res["excess_sigma2_over_m"] > args.cert_tol)
        rec["methods"][name] = res

    for meth in methods:
        if meth == "torch" and not torch_ok:
            continue
        time.sleep(0.15)  # let the previous library's idle threads go to sleep
        meter = LoadMeter().start()
        if meth == "estimator":
            w0, c0 = time.perf_counter(), time.process_time()
            res = fit_estimator(X, Y, H, dv, gate, act, seed)
            record(meth, res, time.perf_counter() - w0, time.process_time() - c0, meter.stop())
            continue
        import torch
        from bench_peers_fit import torch_fit_starts

        starts, lower, upper, layout = estimator_starts(X, Y, H, dv, gate, act,
                                                        args.torch_starts, seed)
        loss = torch_loss(X, Y, layout, gate, act)
        loss(torch.from_numpy(starts[0]))  # wake torch's thread pool (untimed)
        per_start = torch_fit_starts(loss, starts, lower, upper, args.torch_max_iter)
        objs = [s["objective"] for s in per_start]
        res = {"objective": float(min(objs)), "n_starts": len(per_start),
               "passes": int(sum(s["n_evals"] for s in per_start)),
               "start_objectives": [float(v) for v in objs],
               "n_iter": [s["n_iter"] for s in per_start]}
        record(meth, res, float(sum(s["wall"] for s in per_start)),
               float(sum(s["cpu"] for s in per_start)), meter.stop())
    ms = rec["methods"]
    if "estimator" in ms and "torch" in ms:  # the same data: objectives compare directly
        gap = (ms["estimator"]["objective"] - ms["torch"]["objective"]) / unit
        rec["estimator_minus_torch_sigma2_over_m"] = float(gap)
        rec["estimator_at_or_below_torch"] = bool(gap <= args.cert_tol)
    return rec


# ----------------------------------------------------------------------------- the report


def summarize(records, methods):
    """Per case and overall: a JSON-able list of rows."""
    import numpy as np
    from _common import geomean

    rows = []
    cases = list(dict.fromkeys((r["H"], r["N"], r["d"], r["gate"]) for r in records))
    for case in cases + ["all"]:
        recs = records if case == "all" else [
            r for r in records if (r["H"], r["N"], r["d"], r["gate"]) == case]
        row = {"case": "all" if case == "all" else dict(zip(("H", "N", "d", "gate"), case)),
               "fits": len(recs)}
        for meth in methods:
            rs = [r["methods"][meth] for r in recs if meth in r["methods"]]
            if not rs:
                continue
            row[meth] = {
                "median_wall": float(np.median([x["wall"] for x in rs])),
                "median_excess": float(np.median([x["excess_sigma2_over_m"] for x in rs])),
                "failures": int(sum(x["failure"] for x in rs)), "fits": len(rs),
                "max_load": max((x["load"] or 0.0) for x in rs),
            }
        if "estimator" in row and "torch" in row:
            both = [r for r in recs if "estimator_at_or_below_torch" in r]
            row["estimator_at_or_below_torch"] = int(sum(r["estimator_at_or_below_torch"]
                                                         for r in both))
            row["compared"] = len(both)
            if case == "all":
                row["ratio_torch_over_estimator"] = geomean(
                    [r["ratio_torch_over_estimator"] for r in rows])
            else:
                row["ratio_torch_over_estimator"] = (row["torch"]["median_wall"]
                                                     / row["estimator"]["median_wall"])
        rows.append(row)
    return rows


def print_report(rows, methods, format_table):
    header = ["H", "N", "d", "gate", "fits"]
    for meth in methods:
        header += [f"{meth} s/fit", f"{meth} σ²/m vs truth", f"{meth} fail"]
    header += ["torch/est time", "est <= torch", "max load"]
    table = []
    for row in rows:
        c = row["case"]
        line = (["all", "", "", ""] if c == "all" else [c["H"], c["N"], c["d"], c["gate"]])
        line.append(row["fits"])
        for meth in methods:
            r = row.get(meth)
            line += (["-", "-", "-"] if r is None else
                     [f"{r['median_wall']:.2f}", f"{r['median_excess']:+.1f}",
                      f"{r['failures']}/{r['fits']}"])
        ratio = row.get("ratio_torch_over_estimator")
        line.append("-" if ratio is None else f"{ratio:.1f}x")
        line.append("-" if "compared" not in row else
                    f"{row['estimator_at_or_below_torch']}/{row['compared']}")
        line.append(f"{max((row[m]['max_load'] for m in methods if m in row), default=0):.2f}")
        table.append(line)
    print(format_table(header, table))


def write_rst(rows, path):
    """The summary as an RST table: per case the median seconds per fit of both methods, their
    ratio, the median depth below the truth (σ²/m), the fits at or below PyTorch's objective
    ("-" for a JSON written before that count) and the certified failures."""
    head = ("H", "N", "d", "gate", "estimator s", "PyTorch s", "ratio", "estimator σ²/m",
            "PyTorch σ²/m", "est ≤ PyTorch", "failures")
    lines = []
    for row in rows:
        c, e, t = row["case"], row.get("estimator"), row.get("torch")
        if e is None or t is None:
            continue
        lines.append(("all", "", "", "") if c == "all" else
                     (str(c["H"]), str(c["N"]), str(c["d"]), c["gate"]))
        lines[-1] += (f"{e['median_wall']:.2f}", f"{t['median_wall']:.2f}",
                      f"{row['ratio_torch_over_estimator']:.1f}×",
                      f"{e['median_excess']:+.1f}", f"{t['median_excess']:+.1f}",
                      ("-" if "compared" not in row else
                       f"{row['estimator_at_or_below_torch']}/{row['compared']}"),
                      f"{e['failures']}/{e['fits']} · {t['failures']}/{t['fits']}")
    widths = [max(len(h), *(len(x[i]) for x in lines)) for i, h in enumerate(head)]
    rule = "  ".join("=" * w for w in widths)
    out = [rule, "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip(), rule]
    out += ["  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip() for line in lines]
    out.append(rule)
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


# ----------------------------------------------------------------------------- main


def warm_up(args, methods, torch_ok):
    """Compile the Numba kernels of every gate and start PyTorch's LBFGS, untimed."""
    from hmoe_estim.layer import make_attention_regression, random_attention_layer

    for gate in args.gate_names:
        truth = random_attention_layer(1, 2, 2, random_state=0)
        X, Y = make_attention_regression(100, truth, n_tokens=2, gate=gate,
                                         activation=args.activation, noise=0.1, random_state=0)
        if "estimator" in methods:
            fit_estimator(X, Y, 1, 2, gate, args.activation, 0)
        if "torch" in methods and torch_ok:
            check_torch_loss(X, Y, gate, args.activation)
            from bench_peers_fit import torch_fit_starts

            starts, lo, hi, layout = estimator_starts(X, Y, 1, 2, gate, args.activation, 1, 0)
            torch_fit_starts(torch_loss(X, Y, layout, gate, args.activation), starts, lo, hi, 5)


def check_torch_loss(X, Y, gate, act, rtol=1e-10):
    """Exit with status 2 unless the PyTorch loss and its autograd gradient equal the layer
    fit's objective and analytic gradient (``LayerProblem.objective_and_gradient``)."""
    import numpy as np
    import torch

    from hmoe_estim.layer import LayerProblem

    starts, lower, upper, layout = estimator_starts(X, Y, 1, 2, gate, act, 1, 0)
    theta = torch.from_numpy(starts[0]).requires_grad_(True)
    value = torch_loss(X, Y, layout, gate, act)(theta)
    value.backward()
    obj, grad = LayerProblem(X, Y, layout, gate, act, lower, upper).objective_and_gradient(
        starts[0])
    err = max(abs(float(value.detach()) - obj) / abs(obj),
              float(np.abs(theta.grad.numpy() - grad).max() / max(np.abs(grad).max(), 1e-300)))
    if not err <= rtol:
        print(f"the PyTorch loss differs from the layer objective (gate {gate}): relative "
              f"error {err:.3g} > {rtol:g}", file=sys.stderr)
        sys.exit(2)


def main(argv=None):
    args = parse_args(argv)
    if args.from_json:
        if not args.rst:
            raise SystemExit("--from-json writes a table: give --rst PATH.")
        with open(args.from_json) as fh:
            write_rst(json.load(fh)["summary"], args.rst)
        print(f"wrote {args.rst}")
        return 0
    if not args.default_malloc:
        keep_freed_memory([os.path.abspath(__file__)]
                          + (sys.argv[1:] if argv is None else list(argv)))
    limit_threads(args.threads)
    try:
        import torch  # noqa: F401

        torch_ok, why = True, None
    except ImportError as exc:
        torch_ok, why = False, f"not installed ({exc})"
    apply_runtime_limits(args.threads)
    from _common import environment, format_table, wait_for_quiet

    import hmoe_estim

    methods = args.method_names
    env = environment()
    cases = plan(args)
    print(f"bench_layer: {len(cases)} cases x {args.reps} replication(s), methods {methods}, "
          f"threads={args.threads}, n={args.n}, sigma={args.noise}, activation="
          f"{args.activation}", flush=True)
    print(f"CPU: {env['cpu']} ({env['cpu_count']} logical CPUs; affinity "
          f"{env['threads']['affinity']}); numba threads {env['threads'].get('numba_threads')}"
          f", torch threads {env['threads'].get('torch_threads')}; hmoe_estim from "
          f"{hmoe_estim.__file__}", flush=True)
    unavailable = {}
    if "torch" in methods and not torch_ok:
        unavailable["torch"] = why
        print(f"PyTorch unavailable, skipped: {why}", flush=True)
    elif "torch" in methods:
        print(BOX_NOTE + f"; {args.torch_starts} starts from the estimator's start "
              "distribution", flush=True)
    if not args.no_warm_up:
        t0 = time.perf_counter()
        warm_up(args, methods, torch_ok)
        print(f"warm-up (Numba compilation, PyTorch start) {time.perf_counter() - t0:.1f} s",
              flush=True)

    meta = {"benchmark": "bench_layer", "heads": args.H, "tokens": args.N, "dims": args.d,
            "gates": args.gate_names, "activation": args.activation, "n": args.n,
            "reps": args.reps, "first_seed": args.first_seed, "scale": args.scale,
            "noise": args.noise, "cert_tol": args.cert_tol, "methods": methods,
            "threads": args.threads, "quick": args.quick, "warm_up": not args.no_warm_up,
            "torch_starts": args.torch_starts,
            "torch_box": "theta = lo + (hi - lo) * sigmoid(u) on [-10, 10]; LBFGS on u",
            "torch_options": {"line_search_fn": "strong_wolfe", "dtype": "float64",
                              "history_size": 10, "max_iter": args.torch_max_iter,
                              "tolerance_grad": 1e-9, "tolerance_change": 1e-9},
            "unavailable": unavailable, "labels": LABELS}
    records = []
    t_start = time.perf_counter()
    for case in cases:
        for rep in range(args.reps):
            if not args.no_wait:
                wait_for_quiet(max_wait=args.max_wait)
            rec = run_dataset(args, case, rep, methods, torch_ok)
            records.append(rec)
            line = "  ".join(f"{m}: {r['excess_sigma2_over_m']:+8.1f} {r['wall']:7.2f}s"
                             f"{' FAIL' if r['failure'] else ''}"
                             for m, r in rec["methods"].items())
            print(f"[{time.perf_counter() - t_start:6.0f}s] H={case[0]} N={case[1]} "
                  f"d={case[2]} {case[3]:5s} rep {rep}: {line}", flush=True)
    shown = [m for m in methods if m != "torch" or torch_ok]
    rows = summarize(records, shown)
    print(f"\nCPU: {env['cpu']}, {args.threads} threads for every method; n = {args.n}; sigma = "
          f"{args.noise}; m = n·N·d residuals; failures: objective above the truth's by > "
          f"{args.cert_tol} sigma^2/m; times: median seconds per fit (PyTorch: its "
          f"{args.torch_starts} starts together)")
    print()
    print_report(rows, shown, format_table)
    total = time.perf_counter() - t_start
    print(f"\ntotal {total:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({**meta, "summary": rows, "records": records, "environment": env,
                       "total_seconds": total}, fh, indent=1, default=float)
        print(f"wrote {args.json}")
    if args.rst:
        write_rst(rows, args.rst)
        print(f"wrote {args.rst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
