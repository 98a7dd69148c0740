"""How the cost of a whole fit grows: time against n and against the number of parameters P.

Part 1 — fit time against ``n``. The default :class:`hmoe_estim.HMoERegressor` (its own search
and defaults) with one head, the SDPA gate, sigmoid, ``(H, N, K, D) = (1, 2, 2, 3)``, ``K = K*``,
on data of ``make_hmoe_regression`` (noise σ = 0.1), for ``n`` in {1e3, 1e4, 1e5, 1e6}, two
truths (data sets) per ``n``, 2 threads. Each ``n`` runs in a fresh subprocess: after imports and
a warm-up fit on 300 samples (the compiled kernels are then in the baseline) the resident set
is read and the kernel's peak counter reset (``VmHWM``, ``/proc/self/clear_refs``), the data
are loaded (drawn by the parent, stored as ``.npy``), and the fits run. Per fit: wall and CPU
seconds (``time.process_time``, all threads of the process), the passes of ``search_cost_`` by
phase (their total is ``n_kernel_passes_``), the search's rounds and stop, ``train_r2_``, the
other processes' load (cores, ``/proc/stat``). Per ``n``: the peak resident set's growth over
the baseline (the ``VmHWM`` peak after the reset; ``ru_maxrss`` where the reset is refused,
which cannot see a peak below the warm-up's; it includes the data, shown next to it as
``(D + 1) · 8`` bytes per sample). Reported: the median per ``n``, the ratio per decade, and
the exponent ``b`` of ``time ∝ n^b`` (least squares of ``log t`` on ``log n`` over every fit).

Part 2 — fit time against ``P``, from the wide suite's committed results
(``results/solver_wide_one_head.json``, 384 default fits of fresh truths, no new fits): median
wall and CPU seconds per ``P`` bin and per ``P``, and the exponents over every fit (the suite's
own report, ``bench_solver.wide_report``). One head only: the multi-head part of that suite is
not measured yet.

Usage::

    PYTHONPATH=. python benchmarks/bench_fit_scaling.py --json benchmarks/results/fit_scaling.json \
        --plot docs/_static/fit_scaling.png
    python benchmarks/bench_fit_scaling.py --plot-only benchmarks/results/fit_scaling.json \
        --plot docs/_static/fit_scaling.png
    python benchmarks/bench_fit_scaling.py --refresh-P benchmarks/results/fit_scaling.json \
        --plot docs/_static/fit_scaling.png     # part 2 again, from a refitted wide suite
    python benchmarks/bench_fit_scaling.py --quick      # n in {300, 1000}, 1 truth, one process
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

SHAPE = (1, 2, 2, 3)  # (H, N, K, D), K = K*
GATE, ACTIVATION, NOISE = "sdpa", "sigmoid", 0.1
SIZES = [1000, 10000, 100000, 1000000]
QUICK_SIZES = [300, 1000]
WIDE_JSON = os.path.join(HERE, "results", "solver_wide_one_head.json")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help=f"n in {QUICK_SIZES}, one truth, for a smoke test")
    ap.add_argument("--sizes", help="comma-separated n (default 1e3,1e4,1e5,1e6)")
    ap.add_argument("--truths", type=int, default=2, help="data sets per n (default 2)")
    ap.add_argument("--truths-at-max", type=int, default=None,
                    help="data sets at the largest n (default: --truths)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wide", default=WIDE_JSON, help="the wide suite's JSON (part 2)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--plot", metavar="PNG", help="write the two-panel figure")
    ap.add_argument("--plot-only", metavar="JSON", help="plot an earlier --json; no fits")
    ap.add_argument("--refresh-P", metavar="JSON",
                    help="recompute part 2 of an earlier --json from --wide (after the suite's "
                         "results were refitted), rewrite it, report and --plot; no fits")
    ap.add_argument("--no-wait", action="store_true")
    # internal: the worker
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------- worker


def _estimator(seed):
    from hmoe_estim import HMoERegressor

    H, N, K, _ = SHAPE
    return HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate=GATE, activation=ACTIVATION,
                         random_state=seed)


def _draw(n, seed):
    from hmoe_estim import make_hmoe_regression

    H, N, K, D = SHAPE
    return make_hmoe_regression(n, n_heads=H, n_tokens=N, n_experts=K, n_features=D,
                                gate=GATE, activation=ACTIVATION, noise=NOISE,
                                random_state=seed)


def worker(args):
    import gc
    import resource
    import warnings

    from _threads import apply_runtime_limits, limit_threads

    limit_threads(args.threads)
    import numpy as np
    from _common import LoadMeter, wait_for_quiet
    from bench_scaling import _rss_bytes

    apply_runtime_limits(args.threads)
    # warm-up: a whole fit on small data, so the compiled kernels are in the baseline
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        Xw, yw = _draw(300, 12345)
        _estimator(0).fit(Xw, yw).predict(Xw)
    del Xw, yw
    gc.collect()
    rss0 = _rss_bytes()
    maxrss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak_reset = _reset_peak_rss()  # else the warm-up's own peak would hide the fits' below it
    fits, data_bytes = [], None
    for path in args.data.split(","):
        with np.load(path) as z:
            X, y, seed = z["X"], z["y"], int(z["seed"])
        data_bytes = X.nbytes + y.nbytes
        if not args.no_wait:
            wait_for_quiet(max_wait=30, verbose=False)
        est = _estimator(seed)
        meter = LoadMeter().start()
        c0, t0 = time.process_time(), time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, y)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        load = meter.stop()
        cost = {k: {"passes": int(v["passes"]), "seconds": float(v["seconds"])}
                for k, v in est.search_cost_.items()}
        fits.append({"n": int(X.shape[0]), "seed": seed, "wall": wall, "cpu": cpu,
                     "external_load": load, "passes": sum(v["passes"] for v in cost.values()),
                     "n_kernel_passes": int(est.n_kernel_passes_), "search_cost": cost,
                     "search_rounds": int(est.search_rounds_),
                     "search_stop": str(est.search_stop_),
                     "train_r2": float(est.train_r2_)})
        del X, y, est
        gc.collect()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak = _peak_rss() if peak_reset else maxrss
    from _threads import thread_report

    print(json.dumps({"n": args.n, "fits": fits, "data_bytes": data_bytes,
                      "thread_report": thread_report(),
                      "rss_before": rss0, "maxrss_before": maxrss0, "maxrss_after": maxrss,
                      "peak_after": peak,
                      "peak_method": "VmHWM, reset after the warm-up" if peak_reset
                      else "ru_maxrss (VmHWM reset refused)",
                      "peak_growth": peak - rss0}))


def _reset_peak_rss():
    """Reset the kernel's peak resident set (``VmHWM``) to the current one; False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _peak_rss():
    """``VmHWM`` of ``/proc/self/status`` in bytes: the peak resident set since the reset."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _run_worker(extra):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + extra
    res = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(res.stderr)
    if res.returncode != 0:
        raise SystemExit(f"worker failed: {' '.join(extra)}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- analysis


def loglog_fit(x, y):
    """``(b, a)`` of ``log y = a + b log x`` by least squares (None if < 2 distinct x)."""
    import numpy as np

    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0)
    if len(set(x[ok])) < 2:
        return None, None
    b, a = np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)
    return float(b), float(a)


def summarise_n(runs):
    import numpy as np

    rows = []
    for r in runs:
        f = r["fits"]
        rows.append({"n": r["n"], "fits": len(f),
                     "median_wall": float(np.median([x["wall"] for x in f])),
                     "median_cpu": float(np.median([x["cpu"] for x in f])),
                     "median_passes": float(np.median([x["passes"] for x in f])),
                     "max_load": max([x["external_load"] or 0.0 for x in f]),
                     "peak_growth": r["peak_growth"], "data_bytes": r["data_bytes"]})
    allf = [x for r in runs for x in r["fits"]]
    n = [x["n"] for x in allf]
    bw, aw = loglog_fit(n, [x["wall"] for x in allf])
    bc, ac = loglog_fit(n, [x["cpu"] for x in allf])
    return {"rows": rows, "exponent_wall": bw, "intercept_wall": aw,
            "exponent_cpu": bc, "intercept_cpu": ac}


def summarise_P(path):
    import numpy as np
    from bench_solver import wide_report

    with open(path) as fh:
        data = json.load(fh)
    cases = [c for c in data["cases"] if "lm" in c["result"]["methods"]]
    rep = wide_report(cases)["wall_vs_P"]
    P = np.array([c["P"] for c in cases])
    wall = np.array([c["result"]["methods"]["lm"]["wall"] for c in cases])
    cpu = np.array([c["result"]["methods"]["lm"]["cpu"] for c in cases])
    ns = np.array([c["n"] for c in cases])
    per_P = [{"P": int(p), "fits": int((P == p).sum()),
              "median_wall": float(np.median(wall[P == p])),
              "median_cpu": float(np.median(cpu[P == p]))} for p in sorted(set(P.tolist()))]
    cpu_by_n = {str(int(v)): loglog_fit(P[ns == v], cpu[ns == v])[0] for v in sorted(set(ns))}
    bw, aw = loglog_fit(P, wall)
    bc, ac = loglog_fit(P, cpu)
    env = data.get("environment", {})
    return {"source": os.path.relpath(path, os.path.dirname(HERE)), "fits": len(cases),
            "heads": data.get("heads"), "n": data.get("n"), "gates": data.get("gates"),
            "threads": (env.get("threads") or {}).get("affinity"),
            "bins": rep["table"], "per_P": per_P,
            "exponent_wall": bw, "intercept_wall": aw, "exponent_cpu": bc, "intercept_cpu": ac,
            "exponent_wall_by_n": rep["exponent_by_n"], "exponent_cpu_by_n": cpu_by_n,
            "P_range": [int(P.min()), int(P.max())],
            "cpu_over_wall": float(np.median(cpu / wall)),
            "note": "one head only (H = 1, N 2-4, D 2-4, K 2-3, four gates, four activations, "
                    "n 1e3 and 1e4); the multi-head part of the wide suite is not measured "
                    "yet"}


def print_report(out):
    from _common import format_table

    s = out["vs_n"]
    D = SHAPE[3]
    rows, prev = [], None
    for r in s["rows"]:
        rows.append([f"{r['n']:.0e}", r["fits"], f"{r['median_wall']:.3f}",
                     f"{r['median_cpu']:.3f}",
                     f"{r['median_wall'] / prev:.2f}" if prev else "-",
                     f"{r['median_passes']:.0f}", f"{r['peak_growth'] / 2**20:.1f}",
                     f"{r['peak_growth'] / r['n']:.0f}", f"{r['data_bytes'] / r['n']:.0f}",
                     f"{r['max_load']:.2f}"])
        prev = r["median_wall"]
    print(f"\nFit time against n: HMoERegressor defaults, shape (H,N,K,D)={SHAPE}, gate {GATE}, "
          f"{ACTIVATION}, sigma {NOISE}, {out['threads']} threads")
    print(format_table(["n", "fits", "median wall s", "median cpu s", "x per decade",
                        "passes", "peak RSS growth MiB", "B/sample", "data B/sample",
                        "max load"], rows))
    print(f"time ~ n^b over every fit: wall b = {s['exponent_wall']:.2f}, "
          f"CPU b = {s['exponent_cpu']:.2f}")
    p = out["vs_P"]
    if p:
        print(f"\nFit time against P ({p['source']}, {p['fits']} fits, one head only):")
        print(format_table(p["bins"][0], p["bins"][1:]))
        bn = ", ".join(f"n={k}: {v:.2f}" for k, v in p["exponent_cpu_by_n"].items())
        print(f"time ~ P^b over every fit: wall b = {p['exponent_wall']:.2f}, "
              f"CPU b = {p['exponent_cpu']:.2f} (CPU per n: {bn}); "
              f"median cpu/wall {p['cpu_over_wall']:.2f}")
    print(f"(data (D+1)*8 = {(D + 1) * 8} bytes per sample)")


# ----------------------------------------------------------------------------- plot


def plot(out, dst):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    s = out["vs_n"]
    allf = [x for r in out["runs"] for x in r["fits"]]
    ax1.scatter([x["n"] for x in allf], [x["wall"] for x in allf], s=14, alpha=0.5,
                color="C0", label="wall, each fit")
    ax1.scatter([x["n"] for x in allf], [x["cpu"] for x in allf], s=14, alpha=0.5,
                color="C1", marker="s", label="CPU, each fit")
    ns = np.array([r["n"] for r in s["rows"]], float)
    grid = np.geomspace(ns.min(), ns.max(), 50)
    ax1.plot(grid, np.exp(s["intercept_wall"]) * grid ** s["exponent_wall"], color="C0",
             label=f"wall ∝ n^{s['exponent_wall']:.2f}")
    ax1.plot(grid, np.exp(s["intercept_cpu"]) * grid ** s["exponent_cpu"], color="C1", ls="--",
             label=f"CPU ∝ n^{s['exponent_cpu']:.2f}")
    ax1.set(xscale="log", yscale="log", xlabel="n (samples)", ylabel="seconds per fit",
            title=f"one head, SDPA, sigmoid, (H,N,K,D)={SHAPE}, {out['threads']} threads")
    ax1.legend(fontsize=8)
    p = out["vs_P"]
    if p:
        P = np.array([r["P"] for r in p["per_P"]], float)
        ax2.scatter(P, [r["median_wall"] for r in p["per_P"]], color="C0", s=18,
                    label="median wall per P")
        ax2.scatter(P, [r["median_cpu"] for r in p["per_P"]], color="C1", marker="s", s=18,
                    label="median CPU per P")
        grid = np.geomspace(P.min(), P.max(), 50)
        ax2.plot(grid, np.exp(p["intercept_wall"]) * grid ** p["exponent_wall"], color="C0",
                 label=f"wall ∝ P^{p['exponent_wall']:.2f} (all fits)")
        ax2.plot(grid, np.exp(p["intercept_cpu"]) * grid ** p["exponent_cpu"], color="C1",
                 ls="--", label=f"CPU ∝ P^{p['exponent_cpu']:.2f} (all fits)")
        ax2.set(xscale="log", yscale="log", xlabel="P (free parameters)",
                ylabel="seconds per fit",
                title=f"wide suite, one head only, {p['fits']} fits, n 1e3 and 1e4")
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)
    print(f"wrote {dst}")


# ----------------------------------------------------------------------------- driver


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    if args.plot_only or args.refresh_P:
        with open(args.plot_only or args.refresh_P) as fh:
            out = json.load(fh)
        if args.refresh_P:  # part 2 reads committed fits only: part 1's runs are kept as they are
            if not os.path.exists(args.wide):
                raise SystemExit(f"--refresh-P: no wide-suite results at {args.wide} (--wide)")
            out["vs_P"] = summarise_P(args.wide)
            with open(args.refresh_P, "w") as fh:
                json.dump(out, fh, indent=1)
        print_report(out)
        if args.plot:
            plot(out, args.plot)
        return 0
    sizes = (QUICK_SIZES if args.quick else
             [int(float(v)) for v in args.sizes.split(",")] if args.sizes else SIZES)
    truths = 1 if args.quick else args.truths
    at_max = truths if args.truths_at_max is None else args.truths_at_max
    print(f"bench_fit_scaling: n {sizes}, {truths} truths per n ({at_max} at n = {max(sizes)}), "
          f"{args.threads} threads", flush=True)
    import numpy as np

    runs, t_all = [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fit_scaling_") as tmp:
        paths = {}
        for n in sizes:
            paths[n] = []
            for i in range(at_max if n == max(sizes) else truths):
                seed = 1000 * (i + 1) + 7
                X, y = _draw(n, seed)
                path = os.path.join(tmp, f"n{n}_t{i}.npz")
                np.savez(path, X=X, y=y, seed=seed)
                paths[n].append(path)
                del X, y
        # one fresh process per n; --quick runs every n in one process (a smoke test: its
        # memory column is then the process's, over all its n)
        groups = [sizes] if args.quick else [[n] for n in sizes]
        for group in groups:
            t0 = time.perf_counter()
            extra = ["--n", str(max(group)), "--threads", str(args.threads),
                     "--data", ",".join(p for n in group for p in paths[n])]
            if args.no_wait:
                extra.append("--no-wait")
            r = _run_worker(extra)
            for n in group:
                runs.append(dict(r, n=n, fits=[f for f in r["fits"] if f["n"] == n],
                                 shared_process=len(group) > 1))
                print(f"  n={n:.0e}: " + ", ".join(f"{f['wall']:.3f} s" for f in runs[-1]["fits"])
                      + f" (process {time.perf_counter() - t0:.1f} s)", flush=True)
    from _common import environment

    out = {"benchmark": "bench_fit_scaling", "shape": list(SHAPE), "gate": GATE,
           "activation": ACTIVATION, "noise": NOISE, "threads": args.threads,
           "sizes": sizes, "truths": truths, "truths_at_max": at_max,
           "runs": runs, "vs_n": summarise_n(runs),
           "vs_P": summarise_P(args.wide) if os.path.exists(args.wide) else None,
           "environment": environment(), "total_seconds": time.perf_counter() - t_all}
    out["environment"]["cpu_count"] = os.cpu_count()
    print_report(out)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {args.json}")
    if args.plot:
        plot(out, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
