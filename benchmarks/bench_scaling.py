"""Scaling of the Numba kernel with ``n`` and threads, and the peak memory of a fit.

Part 1 — time of one objective+gradient evaluation for ``n`` in {1e3, 1e4, 1e5, 1e6}, gates
``none``/``value``/``sdpa`` (sigmoid), reference shape ``(H, N, K, D) = (2, 3, 3, 4)``, with 1
and 2 threads. Each thread count runs in its own subprocess (thread limits must be set before
the libraries load). Reported: ms, ns per sample, the ratio per decade ``t(10 n) / t(n)`` (10
for linear cost) and the speed-up of 2 threads over 1.

The same calls are also timed in a *fit-like* pattern, each after 100 µs of busy Python work
(about one L-BFGS-B iteration): a passive OpenMP pool falls asleep in between, and every call
then pays the wake-up of its worker threads.

Part 2 — peak memory at ``n`` = 1e5 and 1e6, each in a fresh subprocess: after imports and a
warm-up on 100 samples, the data ``(X, y)`` are drawn and then

- ``eval``: one ``objective_and_gradient`` and one ``predict`` call through the kernels;
- ``fit``: ``HMoERegressor(n_starts=1, max_iter=5).fit(X, y)`` then ``predict(X)``.

Memory is the growth of the peak resident set (``resource.getrusage`` ``ru_maxrss``) over the
resident set before the data existed, and the peak of Python/NumPy allocations
(``tracemalloc``; Numba's own temporaries are not traced). Both are shown per sample, next to
the data's own size ``(D + 1) · 8`` bytes per sample: constant bytes per sample between 1e5
and 1e6 is O(n·D) growth.

Usage::

    python benchmarks/bench_scaling.py [--quick] [--json PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

REFERENCE_SHAPE = (2, 3, 3, 4)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="n up to 1e5, short timing")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--gates", default="none,value,sdpa")
    ap.add_argument("--threads-list", default="1,2")
    ap.add_argument("--no-wait", action="store_true")
    ap.add_argument("--skip-memory", action="store_true")
    # internal: worker modes
    ap.add_argument("--worker", choices=["time", "memory"], help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--what", choices=["eval", "fit"], help=argparse.SUPPRESS)
    return ap.parse_args(argv)


# ----------------------------------------------------------------------------- workers


def worker_time(args):
    from _threads import apply_runtime_limits, limit_threads

    limit_threads(args.threads)
    import numpy as np
    import peers as P
    from _common import time_interleaved, wait_for_quiet

    apply_runtime_limits(args.threads)
    out = []
    for n in [int(float(v)) for v in args.sizes.split(",")]:
        X, y, theta = P.make_case(REFERENCE_SHAPE, n, seed=7)
        fgs = {g: P.make_hmoe(X, y, REFERENCE_SHAPE, g, "sigmoid")
               for g in args.gates.split(",")}
        if not args.no_wait:
            wait_for_quiet(max_wait=60)
        t = time_interleaved({g: (lambda fg=fg: fg(theta)) for g, fg in fgs.items()},
                             warmup=2, min_repeats=5 if args.quick else 9,
                             max_repeats=400, min_time=0.2 if args.quick else 1.0, settle=0.0)
        load = t.pop("_external_load")
        gapped = {g: _time_with_gaps(lambda fg=fg: fg(theta), 0.2 if args.quick else 0.6)
                  for g, fg in fgs.items()}
        for g, r in t.items():
            out.append({"n": n, "gate": g, "threads": args.threads, "median": r["median"],
                        "min": r["min"], "repeats": r["repeats"], "external_load": load,
                        "median_with_gaps": gapped[g]})
        del X, y, fgs
        np.empty(0)
    print(json.dumps(out))


GAP = 100e-6  # seconds of Python work between two calls, about one L-BFGS-B iteration


def _time_with_gaps(fn, min_time):
    """Median time of ``fn()`` when each call follows ``GAP`` s of busy Python work.

    This is the call pattern of a fit: L-BFGS-B works on the main thread between two
    evaluations, long enough for a passive OpenMP pool to fall asleep, so every call pays
    the wake-up of the worker threads.
    """
    import numpy as np

    fn()
    times, spent = [], 0.0
    while spent < min_time or len(times) < 5:
        t_end = time.perf_counter() + GAP
        while time.perf_counter() < t_end:
            pass
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt + GAP
    return float(np.median(times))


def _rss_bytes():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker_memory(args):
    import resource
    import tracemalloc
    import warnings

    from _threads import limit_threads

    limit_threads(args.threads)
    import numpy as np
    import peers as P

    from hmoe_estim import HMoERegressor
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.objective import objective_and_gradient, predict

    H, N, K, D = REFERENCE_SHAPE
    gc, ac = GATE_CODES["value"], ACTIVATION_CODES["sigmoid"]
    # warm-up on tiny data: loads the compiled kernels so their memory is in the baseline
    Xs, ys, th = P.make_case(REFERENCE_SHAPE, 100, seed=1)
    objective_and_gradient(th, np.ascontiguousarray(Xs.T), ys, H, N, K, D, gc, ac)
    predict(th, np.ascontiguousarray(Xs.T), H, N, K, D, gc, ac)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate="value", n_starts=1,
                      max_iter=2, random_state=0).fit(Xs, ys).predict(Xs)
    import gc as _gc

    _gc.collect()
    rss0 = _rss_bytes()
    maxrss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    n = args.n
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, size=(n, D))
    y = rng.normal(size=n)
    data_bytes = X.nbytes + y.nbytes
    tracemalloc.start()
    t0 = time.perf_counter()
    if args.what == "eval":
        XT = np.ascontiguousarray(X.T)
        objective_and_gradient(th, XT, y, H, N, K, D, gc, ac)
        predict(th, XT, H, N, K, D, gc, ac)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate="value",
                                n_starts=1, max_iter=5, random_state=0).fit(X, y)
            est.predict(X)
    wall = time.perf_counter() - t0
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({
        "n": n, "what": args.what, "data_bytes": data_bytes, "rss_before": rss0,
        "maxrss_before": maxrss0, "maxrss_after": maxrss,
        "peak_growth": maxrss - rss0, "traced_peak": traced_peak, "wall": wall,
    }))


# ----------------------------------------------------------------------------- driver


def _run_worker(extra):
    cmd = [sys.executable, os.path.abspath(__file__)] + extra
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit(f"worker failed: {' '.join(extra)}")
    sys.stderr.write(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    args = parse_args(argv)
    if args.worker == "time":
        return worker_time(args)
    if args.worker == "memory":
        return worker_memory(args)

    from _common import format_table

    sizes = [1000, 10000, 100000] if args.quick else [1000, 10000, 100000, 1000000]
    threads_list = [int(t) for t in args.threads_list.split(",")]
    gates = args.gates.split(",")
    print(f"bench_scaling: shape {REFERENCE_SHAPE}, gates {gates}, n {sizes}, "
          f"threads {threads_list}")
    timings = []
    for t in threads_list:
        extra = ["--worker", "time", "--threads", str(t), "--gates", args.gates,
                 "--sizes", ",".join(map(str, sizes))]
        if args.quick:
            extra.append("--quick")
        if args.no_wait:
            extra.append("--no-wait")
        timings += _run_worker(extra)

    def med(n, g, t):
        for r in timings:
            if r["n"] == n and r["gate"] == g and r["threads"] == t:
                return r["median"]
        return None

    def gap(n, g, t):
        for r in timings:
            if r["n"] == n and r["gate"] == g and r["threads"] == t:
                return r["median_with_gaps"]
        return None

    rows = []
    for g in gates:
        for t in threads_list:
            for j, n in enumerate(sizes):
                m = med(n, g, t)
                dec = med(sizes[j - 1], g, t) if j else None
                sp = med(n, g, 1) / m if (1 in threads_list and t != 1) else None
                mg = gap(n, g, t)
                spg = gap(n, g, 1) / mg if (1 in threads_list and t != 1) else None
                rows.append([g, t, f"{n:.0e}", f"{m * 1e3:.3f}", f"{m / n * 1e9:.1f}",
                             f"{m / dec:.2f}" if dec else "-",
                             f"{sp:.2f}" if sp else "-", f"{mg * 1e3:.3f}",
                             f"{spg:.2f}" if spg else "-"])
    print(format_table(["gate", "threads", "n", "ms", "ns/sample", "t(n)/t(n/10)",
                        "speed-up vs 1", "ms, fit-like calls", "speed-up vs 1"], rows))
    print(f"(fit-like calls: each call follows {GAP * 1e6:.0f} us of Python work, as between "
          "two L-BFGS-B evaluations)")
    loads = [r["external_load"] for r in timings if r["external_load"] is not None]
    if loads:
        print(f"other processes' CPU load during timing: max {max(loads):.2f} cores")

    memory = []
    if not args.skip_memory:
        mem_sizes = [100000] if args.quick else [100000, 1000000]
        for what in ("eval", "fit"):
            for n in mem_sizes:
                memory.append(_run_worker(["--worker", "memory", "--threads", "2",
                                           "--n", str(n), "--what", what]))
        D = REFERENCE_SHAPE[3]
        mrows = []
        for r in memory:
            n = r["n"]
            mrows.append([r["what"], f"{n:.0e}", f"{r['data_bytes'] / 2**20:.1f}",
                          f"{r['peak_growth'] / 2**20:.1f}",
                          f"{r['peak_growth'] / n:.1f}",
                          f"{(r['peak_growth'] - r['data_bytes']) / n:.1f}",
                          f"{r['traced_peak'] / 2**20:.1f}", f"{r['traced_peak'] / n:.1f}"])
        print()
        print(f"Peak memory, gate value, shape {REFERENCE_SHAPE}; data = X and y = "
              f"{(D + 1) * 8} bytes/sample")
        print(format_table(["what", "n", "data MiB", "peak RSS growth MiB", "B/sample",
                            "beyond data B/sample", "tracemalloc peak MiB",
                            "traced B/sample"], mrows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"benchmark": "bench_scaling", "shape": list(REFERENCE_SHAPE),
                       "timings": timings, "memory": memory}, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
