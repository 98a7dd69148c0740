"""One objective+gradient evaluation: hmoe-estim's Numba kernel against NumPy, PyTorch, JAX.

All implementations run in this one process, on the same data and parameter vector, in
float64, limited to the same number of threads (``--threads``, default 2). Before timing, each
case checks that every peer gives the kernel's objective and gradient to a relative ``--rtol``
(default 1e-8; gradient compared in max-norm) and exits with status 2 if one does not.

Cases: gates ``none``, ``value``, ``sdpa`` (sigmoid), ``n`` in {1e3, 1e4, 1e5} and
``(H, N, K, D)`` in {(1,2,3,2), (2,3,3,4), (4,4,4,8)}. Timings are medians of interleaved
repeats after warm-up (see :mod:`_common`); the ratio is peer time / hmoe time.

Usage::

    python benchmarks/bench_kernels.py                 # full run, 2 threads
    python benchmarks/bench_kernels.py --quick         # a few small cases
    python benchmarks/bench_kernels.py --json out.json --threads 1

On processors where ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` are set, unset both for this
command alone (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python ...``); the header prints
the OpenBLAS kernel numpy then runs.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, keep_freed_memory, limit_threads  # noqa: E402

REFERENCE_SHAPE = (2, 3, 3, 4)
REFERENCE_N = 100_000


def _shape(text):
    parts = tuple(int(v) for v in text.split(","))
    if len(parts) != 4 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"shape must be H,N,K,D with positive ints; got {text!r}")
    return parts


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="threads for every library (2)")
    ap.add_argument("--quick", action="store_true", help="small sizes, short timing")
    ap.add_argument("--json", metavar="PATH", help="write the results as JSON")
    ap.add_argument("--gates", default="none,value,sdpa", help="comma list (none,value,sdpa)")
    ap.add_argument("--activation", default="sigmoid")
    ap.add_argument("--sizes", help="comma list of n (default 1000,10000,100000)")
    ap.add_argument("--shapes", nargs="+", type=_shape,
                    help="H,N,K,D ... (default 1,2,3,2 2,3,3,4 4,4,4,8)")
    ap.add_argument("--peers", default="numpy,torch,jax", help="comma list of peers")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--min-time", type=float, help="seconds per case for the slowest (1.0)")
    ap.add_argument("--omp-wait-policy", default="PASSIVE",
                    help="OMP_WAIT_POLICY for all libraries: PASSIVE (what hmoe_estim sets), "
                         "ACTIVE, or 'default' to leave the environment alone")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc's malloc settings alone (peers then page-fault on "
                         "every call; see _threads.keep_freed_memory)")
    ap.add_argument("--no-wait", action="store_true",
                    help="do not wait for a quiet machine before each case")
    return ap.parse_args(argv)


def check_agreement(results, rtol):
    """Compare every ``(value, grad)`` with ``results["hmoe"]``; return ``{name: (ev, eg)}``."""
    import numpy as np

    v0, g0 = results["hmoe"]
    errs = {}
    for name, (v, g) in results.items():
        ev = abs(v - v0) / max(abs(v0), 1e-300)
        eg = float(np.max(np.abs(g - g0)) / max(np.max(np.abs(g0)), 1e-300))
        errs[name] = (ev, eg)
    return errs


def main(argv=None):
    args = parse_args(argv)
    if not args.default_malloc:
        keep_freed_memory([os.path.abspath(__file__)]
                          + (sys.argv[1:] if argv is None else list(argv)))
    limit_threads(args.threads,
                  None if args.omp_wait_policy == "default" else args.omp_wait_policy)


    import peers as P
    from _common import environment, geomean, time_interleaved, wait_for_quiet

    available, skipped = P.available_peers(tuple(s for s in args.peers.split(",") if s))
    apply_runtime_limits(args.threads)

    gates = [g for g in args.gates.split(",") if g]
    if args.quick:
        sizes = [1000, 10000]
        shapes = [REFERENCE_SHAPE]
        min_time, min_rep, max_rep = 0.05, 3, 50
    else:
        sizes = [1000, 10000, 100000]
        shapes = [(1, 2, 3, 2), REFERENCE_SHAPE, (4, 4, 4, 8)]
        min_time, min_rep, max_rep = 1.0, 9, 1000
    if args.sizes:
        sizes = [int(float(v)) for v in args.sizes.split(",")]
    if args.shapes:
        shapes = args.shapes
    if args.min_time is not None:
        min_time = args.min_time

    env = environment()
    print(f"bench_kernels: threads={args.threads}, activation={args.activation}, "
          f"cpu={env['cpu']}")
    print(f"  numpy {env['numpy']}, numba {env['numba']}, peers: {available}"
          + (f", skipped: {skipped}" if skipped else ""))
    for pool in env["threads"].get("threadpools", []) if isinstance(
            env["threads"].get("threadpools"), list) else []:
        print(f"  threadpool: {pool}")
    print(f"  OPENBLAS_CORETYPE={env['threads']['OPENBLAS_CORETYPE']}, "
          f"OPENBLAS_L2_SIZE={env['threads']['OPENBLAS_L2_SIZE']}, "
          f"OMP_WAIT_POLICY={env['threads']['OMP_WAIT_POLICY']}, "
          f"GOMP_SPINCOUNT={env['threads']['GOMP_SPINCOUNT']}, "
          f"affinity={env['threads']['affinity']}")
    print(f"  glibc malloc: {env['threads']['malloc']}")
    for name, why in skipped.items():
        print(f"  note: peer {name!r} skipped: {why}")

    impls = ["hmoe"] + available
    cases = []
    for shape in shapes:
        for n in sizes:
            X, y, theta = P.make_case(shape, n, seed=12345)
            for gate in gates:
                fgs = {nm: P.make_peer(nm, X, y, shape, gate, args.activation) for nm in impls}
                results = {nm: fg(theta) for nm, fg in fgs.items()}
                errs = check_agreement(results, args.rtol)
                bad = {nm: e for nm, e in errs.items() if max(e) > args.rtol}
                if bad:
                    print(f"\nFAILED agreement for shape={shape} n={n} gate={gate}: "
                          + ", ".join(f"{nm}: rel err objective {ev:.2e}, gradient {eg:.2e}"
                                      for nm, (ev, eg) in bad.items())
                          + f" (rtol {args.rtol:g})", file=sys.stderr)
                    return 2
                if not args.no_wait:
                    wait_for_quiet(max_wait=5 if args.quick else 120)
                timing = time_interleaved(
                    {nm: (lambda fg=fg: fg(theta)) for nm, fg in fgs.items()},
                    warmup=2, min_repeats=min_rep, max_repeats=max_rep, min_time=min_time,
                    block_time=0.01 if args.quick else 0.2, settle=0.0 if args.quick else 0.15,
                )
                load = timing.pop("_external_load")
                case = {
                    "shape": list(shape), "n": n, "gate": gate, "activation": args.activation,
                    "times": timing, "max_rel_err": {nm: max(e) for nm, e in errs.items()},
                    "external_load": load,
                    "ratios": {nm: timing[nm]["median"] / timing["hmoe"]["median"]
                               for nm in available},
                    "ratios_min": {nm: timing[nm]["min"] / timing["hmoe"]["min"]
                                   for nm in available},
                }
                cases.append(case)
                _print_row(case, available, header=len(cases) == 1)

    # ratios for the reference case, geometric mean over the gates
    ref = [c for c in cases if tuple(c["shape"]) == REFERENCE_SHAPE and c["n"] == REFERENCE_N]
    ref_note = f"shape {REFERENCE_SHAPE}, n={REFERENCE_N}"
    if not ref:  # quick or custom run: the largest n of the reference shape, else of anything
        pool = [c for c in cases if tuple(c["shape"]) == REFERENCE_SHAPE] or cases
        nmax = max(c["n"] for c in pool)
        ref = [c for c in pool if c["n"] == nmax]
        ref_note = f"shape {tuple(ref[0]['shape'])}, n={nmax} (reference case not run)"
    ratios = {nm: geomean([c["ratios"][nm] for c in ref]) for nm in available}
    ratios_min = {nm: geomean([c["ratios_min"][nm] for c in ref]) for nm in available}
    print(f"\nRatios (peer time / hmoe time), {ref_note}, geometric mean over gates "
          f"{[c['gate'] for c in ref]}:")
    for nm in available:
        print(f"  {nm:6s} {ratios[nm]:7.2f}x   (from minimum times: {ratios_min[nm]:.2f}x)")
    for nm in skipped:
        print(f"  {nm:6s} skipped")
    print("Minor page faults per call there: " + ", ".join(
        f"{nm} {geomean([c['times'][nm]['minor_faults_per_call'] + 1 for c in ref]) - 1:.0f}"
        for nm in ["hmoe"] + available))

    if args.json:
        out = {
            "benchmark": "bench_kernels", "threads": args.threads, "quick": args.quick,
            "rtol": args.rtol, "reference": ref_note,
            "ratios": {nm: ratios.get(nm) for nm in P.PEER_NAMES},
            "ratios_from_min": {nm: ratios_min.get(nm) for nm in P.PEER_NAMES},
            "skipped": skipped, "cases": cases, "environment": env,
        }
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
        print(f"wrote {args.json}")
    return 0


def _print_row(case, available, header):
    cols = ["H,N,K,D", "n", "gate", "hmoe ms", "ns/sample"]
    for nm in available:
        cols += [f"{nm} ms", f"{nm}/hmoe"]
    cols += ["load"]
    t = case["times"]
    row = [",".join(map(str, case["shape"])), f"{case['n']:.0e}", case["gate"],
           f"{t['hmoe']['median'] * 1e3:.3f}", f"{t['hmoe']['median'] / case['n'] * 1e9:.1f}"]
    for nm in available:
        row += [f"{t[nm]['median'] * 1e3:.3f}", f"{case['ratios'][nm]:.2f}"]
    load = case["external_load"]
    row += ["?" if load is None else f"{load:.2f}"]
    widths = [max(len(c), 9) for c in cols]
    if header:
        print()
        print("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
        print("  ".join("-" * w for w in widths))
    print("  ".join(r.rjust(w) for r, w in zip(row, widths)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
