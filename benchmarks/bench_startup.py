"""Start-up costs: ``import hmoe_estim`` and the first small fit of a fresh process.

Each measurement is a fresh ``python`` subprocess:

- ``import hmoe_estim`` (the lazy package: no Numba, SciPy or scikit-learn yet), and
  ``from hmoe_estim import HMoERegressor`` (pulls scikit-learn and SciPy), timed inside the
  process with ``time.perf_counter`` around the import;
- the first fit a new user makes: ``make_hmoe_regression(500, gate="value")`` and
  ``G2Regressor().fit`` with the defaults, timed from before the import to after the fit
  (import, data generation and fit also separately), with Numba's cache
  *warm* (the package's ``__pycache__``, filled by a first run) and *cold*
  (``NUMBA_CACHE_DIR`` pointing at a fresh empty directory: every kernel compiles).

The subprocess's whole wall time (interpreter start-up included) is reported too.

Usage::

    python benchmarks/bench_startup.py [--repeats 5] [--json PATH]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

IMPORT_SNIPPET = """
import time
t0 = time.perf_counter()
import hmoe_estim
t1 = time.perf_counter()
print({"seconds": t1 - t0})
"""

IMPORT_EST_SNIPPET = """
import time
t0 = time.perf_counter()
from hmoe_estim import HMoERegressor
t1 = time.perf_counter()
print({"seconds": t1 - t0})
"""

FIT_SNIPPET = """
import time
t0 = time.perf_counter()
import warnings
from hmoe_estim import G2Regressor, make_hmoe_regression
t1 = time.perf_counter()
X, y = make_hmoe_regression(500, gate="value", random_state=0)
t2 = time.perf_counter()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    est = G2Regressor(random_state=0).fit(X, y)
t3 = time.perf_counter()
print({"seconds": t3 - t0, "import": t1 - t0, "data": t2 - t1, "fit": t3 - t2,
       "n_iter": int(est.n_iter_)})
"""


WAIT = True


def run_snippet(code, env=None, threads=2):
    import ast

    if WAIT:
        from _common import wait_for_quiet

        wait_for_quiet(max_wait=10, verbose=False)

    full_env = dict(os.environ if env is None else env)
    full_env.setdefault("NUMBA_NUM_THREADS", str(threads))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=full_env)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        raise SystemExit("subprocess failed")
    out = ast.literal_eval(res.stdout.strip().splitlines()[-1])
    out["process_wall"] = wall
    return out


def summary(runs, key):
    vals = [r[key] for r in runs]
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "runs": vals}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="warm runs of each (5)")
    ap.add_argument("--cold-repeats", type=int, default=2, help="cold-cache fits (2)")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--no-wait", action="store_true")
    args = ap.parse_args(argv)
    global WAIT
    WAIT = not args.no_wait

    results = {}
    results["import"] = [run_snippet(IMPORT_SNIPPET) for _ in range(args.repeats)]
    results["import_estimator"] = [run_snippet(IMPORT_EST_SNIPPET) for _ in range(args.repeats)]
    run_snippet(FIT_SNIPPET)  # make sure the package cache is warm
    results["fit_warm"] = [run_snippet(FIT_SNIPPET) for _ in range(args.repeats)]
    cold = []
    for _ in range(args.cold_repeats):
        with tempfile.TemporaryDirectory(prefix="numba_cold_") as tmp:
            env = dict(os.environ, NUMBA_CACHE_DIR=tmp)
            cold.append(run_snippet(FIT_SNIPPET, env=env))
    results["fit_cold"] = cold

    rows = [
        ("import hmoe_estim", summary(results["import"], "seconds"),
         summary(results["import"], "process_wall")),
        ("from hmoe_estim import HMoERegressor", summary(results["import_estimator"], "seconds"),
         summary(results["import_estimator"], "process_wall")),
        ("first fit, warm Numba cache", summary(results["fit_warm"], "seconds"),
         summary(results["fit_warm"], "process_wall")),
        ("first fit, cold Numba cache", summary(results["fit_cold"], "seconds"),
         summary(results["fit_cold"], "process_wall")),
    ]
    print("bench_startup (medians over fresh processes; min-max in brackets)")
    w = max(len(r[0]) for r in rows)
    print(f"{'':{w}}  {'in process s':>22}  {'process wall s':>22}")
    for name, inproc, wall in rows:
        print(f"{name:{w}}  {inproc['median']:8.3f} [{inproc['min']:.3f}-{inproc['max']:.3f}]"
              f"  {wall['median']:8.3f} [{wall['min']:.3f}-{wall['max']:.3f}]")
    fw = results["fit_warm"]
    for label, runs in (("warm", fw), ("cold", results["fit_cold"])):
        parts = ", ".join(f"{k} {statistics.median(r[k] for r in runs):.3f} s"
                          for k in ("import", "data", "fit"))
        print(f"({label}: {parts})")
    if args.json:
        with open(args.json, "w") as fh:
            from _common import environment

            json.dump({"benchmark": "bench_startup", "python": sys.executable,
                       "results": results, "environment": environment()}, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
