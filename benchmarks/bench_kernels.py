"""One objective+gradient evaluation: hmoe-estim's Numba kernel against NumPy, PyTorch, JAX.

All implementations run in this one process, on the same data and parameter vector, in
float64, limited to the same number of threads (``--threads``, default 2). Before timing, each
case checks that every peer gives the kernel's objective and gradient to a relative ``--rtol``
(default 1e-8; gradient compared in max-norm) and exits with status 2 if one does not.

Cases: gates ``none``, ``value``, ``sdpa`` (sigmoid), ``n`` in {1e3, 1e4, 1e5} and
``(H, N, K, D)`` in {(1,2,3,2), (2,3,3,4), (4,4,4,8)}. Timings are medians of interleaved
repeats after warm-up (see :mod:`_common`); the ratio is peer time / hmoe time.

``--gn-ratio`` times, instead of the peers, the Gauss–Newton pass that the Levenberg–Marquardt
solver runs (``KernelPasses.sums``: ``JᵀJ``, ``Jᵀr``, ``Σr²``) against the objective+gradient
kernel on the same data, at P = 27 (shape 1,3,3,2) and P = 118 (shape 2,3,3,4), n = 1e4 and
1e5, MHA (gate none: the pass sums a basis of the rows of ``J``) and the value gate (the rows
themselves), with the earlier ``JᵀJ`` accumulation (one row against four columns; kept below as
:func:`_reference_pass`, the reference) in the same interleaved rounds. It prints both
ratios ``JᵀJ pass / objective+gradient`` and the CPU.

Usage::

    python benchmarks/bench_kernels.py                 # full run, 2 threads
    python benchmarks/bench_kernels.py --quick         # a few small cases
    python benchmarks/bench_kernels.py --json out.json --threads 1
    python benchmarks/bench_kernels.py --gn-ratio --json benchmarks/results/gn_pass.json

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
#: Shapes of the Gauss–Newton ratio (``--gn-ratio``): P = 27 and P = 118.
GN_SHAPES = ((1, 3, 3, 2), (2, 3, 3, 4))


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
    ap.add_argument("--gn-ratio", action="store_true",
                    help="time the Gauss-Newton (JtJ) pass against objective+gradient instead "
                         "of the peers (gates from --gates; default none and value)")
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


    if args.gn_ratio:
        return gn_ratio(args)

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


def _reference_pass():
    """The Gauss–Newton pass with the earlier ``JᵀJ`` accumulation, as the reference.

    Returns ``entry(theta, XT, y, offset, bv, H, N, K, gate, act, partial, nthreads)``, a
    compiled pass identical to the package's (same forward and Jacobian blocks, chunks and
    workers, gate and activation as literal types) except that it forms the rows of ``J``
    itself for every gate (no basis for the linear gates) and sums them with
    :func:`old_accumulate`: a copy of ``_accumulate_block`` before the classes of equal
    entries and the tiles (every entry of the upper triangle, one row of ``JᵀJ`` against four
    columns).
    Compiled here, after the thread limits, on first use.
    """
    from numba import njit, prange, types

    from hmoe_estim.kernels.jacobian import _FM, _jacobian_block
    from hmoe_estim.kernels.layout import theta_offsets
    from hmoe_estim.kernels.objective import _PARALLEL, BLOCK, _forward_block, _temporaries
    from hmoe_estim.kernels.target import wide_vectors

    @njit(error_model="numpy", fastmath=_FM)
    def old_accumulate(J, res, P, b, acc):
        wide_vectors()
        idx = 0
        for p in range(P):
            q = p
            while q < P:
                m = P - q if P - q < 4 else 4
                s0 = s1 = s2 = s3 = 0.0
                if m == 4:
                    for t in range(b):
                        jp = J[p, t]
                        s0 += jp * J[q, t]
                        s1 += jp * J[q + 1, t]
                        s2 += jp * J[q + 2, t]
                        s3 += jp * J[q + 3, t]
                elif m == 3:
                    for t in range(b):
                        jp = J[p, t]
                        s0 += jp * J[q, t]
                        s1 += jp * J[q + 1, t]
                        s2 += jp * J[q + 2, t]
                elif m == 2:
                    for t in range(b):
                        jp = J[p, t]
                        s0 += jp * J[q, t]
                        s1 += jp * J[q + 1, t]
                else:
                    for t in range(b):
                        s0 += J[p, t] * J[q, t]
                acc[idx] += s0
                if m > 1:
                    acc[idx + 1] += s1
                if m > 2:
                    acc[idx + 2] += s2
                if m > 3:
                    acc[idx + 3] += s3
                idx += m
                q += m
        for p in range(P):
            s0 = 0.0
            s1 = 0.0
            for t in range(b):
                s0 += J[p, t] * res[t]
                s1 += J[p, t]
            acc[idx + p] += s0
            acc[idx + P + 1 + p] += s1
        s0 = 0.0
        s1 = 0.0
        for t in range(b):
            s0 += res[t] * res[t]
            s1 += res[t]
        acc[idx + P] += s0
        acc[idx + 2 * P + 1] += s1

    @njit(error_model="numpy", fastmath=_FM)
    def old_worker(wk, nworkers, theta, XT, y, offset, bv, H, N, K, gate, act, partial):
        wide_vectors()
        D, n = XT.shape
        P = theta_offsets(H, N, K, D)[3]
        nchunks = partial.shape[0]
        nblocks = (n + BLOCK - 1) // BLOCK
        (x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, v, du, fo, e, coef, work, ones, f,
         fh, rest) = _temporaries(H, N, K, D, gate, P + 1)
        J = rest[:P]
        res = rest[P]
        for c in range(wk, nchunks, nworkers):
            acc = partial[c]
            for blk in range(c * nblocks // nchunks, (c + 1) * nblocks // nchunks):
                j0 = blk * BLOCK
                b = n - j0 if n - j0 < BLOCK else BLOCK
                _forward_block(XT, j0, b, theta, bv, H, N, K, gate, act,
                               x, xx, s, g, z, phz, dphz, vv, u, phu, dphu, fo, f, work)
                for t in range(b):
                    res[t] = f[t] + offset - y[j0 + t]
                _jacobian_block(b, theta, H, N, K, gate, False, J, x, xx, g, z, phz, dphz,
                                vv, u, phu, dphu, v, du, fo, fh, coef)
                old_accumulate(J, res, P, b, acc)

    @njit(parallel=_PARALLEL)
    def old_pass(theta, XT, y, offset, bv, H, N, K, gate, act, partial, nthreads):
        nworkers = min(nthreads, partial.shape[0])
        for wk in prange(nworkers):
            old_worker(wk, nworkers, theta, XT, y, offset, bv, H, N, K, gate, act, partial)

    entries = {}

    def entry(theta, XT, y, offset, bv, H, N, K, gate, act, partial, nthreads):
        key = (gate, act)
        if key not in entries:
            i8, f8 = types.int64, types.float64
            a1, a2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
            entries[key] = old_pass.compile(
                (a1, a2, a1, f8, a1, i8, i8, i8, types.literal(int(gate)),
                 types.literal(int(act)), a2, i8))
        return entries[key](theta, XT, y, offset, bv, H, N, K, gate, act, partial, nthreads)

    return entry


def gn_ratio(args):
    """``--gn-ratio``: the Gauss–Newton pass against objective+gradient (module docstring)."""
    import numpy as np
    import peers as PP
    from _common import environment, time_interleaved, wait_for_quiet

    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels import KernelPasses
    from hmoe_estim.kernels.jacobian import _jchunks, _symmetric_index
    from hmoe_estim.kernels.objective import (
        chunk_total,
        kernel_threads,
        mixed_values,
        objective_and_gradient,
    )

    apply_runtime_limits(args.threads)
    gates = [g for g in args.gates.split(",") if g] if args.gates != "none,value,sdpa" \
        else ["none", "value"]
    sizes = [int(float(v)) for v in args.sizes.split(",")] if args.sizes else [10_000, 100_000]
    shapes = args.shapes or list(GN_SHAPES)
    min_time = args.min_time if args.min_time is not None else (0.1 if args.quick else 1.0)
    env = environment()
    print(f"bench_kernels --gn-ratio: threads={args.threads}, activation={args.activation}, "
          f"cpu={env['cpu']} ({env['cpu_count']} CPUs), numba {env['numba']}")
    import hmoe_estim

    print(f"  hmoe_estim from {os.path.dirname(hmoe_estim.__file__)}")
    old_entry = _reference_pass()
    cols = ["H,N,K,D", "P", "n", "gate", "obj+grad ms", "JtJ old ms", "JtJ ms", "old ratio",
            "ratio", "speed-up", "load"]
    print()
    print("  ".join(f"{c:>11}" for c in cols))
    cases = []
    for shape in shapes:
        H, N, K, D = shape
        for n in sizes:
            X, y, theta = PP.make_case(shape, n, seed=12345)
            XT = np.ascontiguousarray(X.T)
            yc = np.ascontiguousarray(y)
            P = theta.size
            ntri = P * (P + 1) // 2
            width = ntri + 2 * P + 2
            sym = _symmetric_index(P)
            for gate in gates:
                gc, ac = GATE_CODES[gate], ACTIVATION_CODES[args.activation]
                passes = KernelPasses(XT, yc, shape, gc, ac)
                partial = np.zeros((_jchunks(n, width)[1], width))
                bv = mixed_values(theta, H, N, K, D, gc)
                nthreads = kernel_threads(n)

                def old_sums():
                    partial.fill(0.0)
                    old_entry(theta, XT, yc, 0.0, bv, H, N, K, gc, ac, partial, nthreads)
                    return chunk_total(partial)[sym]

                fns = {
                    "objgrad": lambda: objective_and_gradient(theta, XT, yc, H, N, K, D, gc, ac),
                    "jtj_old": old_sums,
                    "jtj": lambda: passes.sums(theta, 0.0),
                }
                new, old = passes.sums(theta, 0.0)[0], old_sums()
                err = float(np.max(np.abs(new - old)) / np.max(np.abs(old)))
                if not err <= 1e-12:
                    print(f"\nFAILED: JtJ of the new and the earlier accumulation differ by "
                          f"{err:.2e} (shape {shape}, n={n}, gate {gate})", file=sys.stderr)
                    return 2
                if not args.no_wait:
                    wait_for_quiet(max_wait=5 if args.quick else 60)
                timing = time_interleaved(fns, warmup=2, min_repeats=3 if args.quick else 7,
                                          max_repeats=200, min_time=min_time,
                                          block_time=0.02 if args.quick else 0.2, settle=0.0)
                load = timing.pop("_external_load")
                med = {k: timing[k]["median"] for k in fns}
                case = {
                    "shape": list(shape), "P": P, "n": n, "gate": gate,
                    "activation": args.activation, "times": timing, "external_load": load,
                    "max_rel_diff_old_new": err,
                    "ratio": med["jtj"] / med["objgrad"],
                    "ratio_old": med["jtj_old"] / med["objgrad"],
                    "ratio_from_min": timing["jtj"]["min"] / timing["objgrad"]["min"],
                    "ratio_old_from_min": timing["jtj_old"]["min"] / timing["objgrad"]["min"],
                }
                cases.append(case)
                row = [",".join(map(str, shape)), P, f"{n:.0e}", gate,
                       f"{med['objgrad'] * 1e3:.2f}", f"{med['jtj_old'] * 1e3:.2f}",
                       f"{med['jtj'] * 1e3:.2f}", f"{case['ratio_old']:.2f}",
                       f"{case['ratio']:.2f}", f"{med['jtj_old'] / med['jtj']:.2f}",
                       "?" if load is None else f"{load:.2f}"]
                print("  ".join(f"{c!s:>11}" for c in row), flush=True)
    print("\nratio = JtJ pass (KernelPasses.sums) / objective+gradient, medians of interleaved "
          f"repeats, {args.threads} threads; old = the earlier accumulation (reference).")
    if args.json:
        out = {"benchmark": "bench_kernels --gn-ratio", "threads": args.threads,
               "quick": args.quick, "cpu": env["cpu"], "cases": cases, "environment": env}
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
