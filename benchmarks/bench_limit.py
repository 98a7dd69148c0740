"""How close the kernel comes to the machine's limit on the work it must do.

1. **Useful work per sample** of one objective+gradient evaluation, counted from the formulas
   (paper eq. (2), (3), (9), (12)) for ``(H, N, K, D)`` with ``T = D (D + 1) / 2`` —
   multiply–adds (MA; one
   multiply, add or multiply-add each) and transcendental calls (``exp``; the sigmoid is one
   ``exp`` and one division):

   ========================  ==========================  ======================================
   part                      multiply–adds               exp
   ========================  ==========================  ======================================
   pair products             ``T``
   quadratic forms           ``H (N-1) T``
   softmax                   ``3 H N``                   ``H N``
   experts ``a·x``           ``H N K D``; none/output:
                             ``H N D`` (``b·x``, below)
   mix (none/value)          none ``H N``; value         value: ``H N K`` (φ), + ``2 H N K``
                             ``H N K + H N``
   mix (sdpa)                ``H N K + H K``             ``H K`` (φ), + ``2 H K``
   residual, loss            ``2``
   grad omega, coefficients  none ``H N``; value          output gate: ``1``
                             ``3 H N K``; sdpa
                             ``2 H N K + 3 H K``
   grad of the gate          none/value ``3 H N``;
                             sdpa ``2 H N K + 2 H N``
   grad ``a``                ``H N K D``; none/output
                             ``H N D`` (``G``, below)
   grad ``M``                ``H (N-1) T``
   ========================  ==========================  ======================================

   With linear experts (gates ``none`` and ``output``) the function depends on
   ``(omega, a)`` only through ``b[h, i] = Σ_k omega[h, k] a[h, i, k]``, so the work that must
   be done per sample is ``b·x`` and ``G[h, i] = Σ_j e_j g_i x_j`` (``H N D`` each); the
   per-call cost of forming ``b`` and expanding ``G`` to the gradients is ``O(H N K D)`` and
   not counted per sample. This is what the kernel does since the count was revised.

2. **The machine's throughput**, measured in the same run with the same threads: the DGEMM
   rate of NumPy's BLAS (``A @ B``, 2048², the peak of fused multiply–adds this machine
   reaches), the rate of a Numba ``y += a·x`` loop on L1-resident rows (what a loop over a
   block of samples can reach: two loads and a store per MA), and NumPy's ``exp`` on an
   L2-resident array, one array per thread (NumPy releases the GIL), as well as the package's
   own vectorised ``exp_block`` when it has one.

3. **The limit** for one sample is ``MA / rate + exp / rate_exp``; the kernel's *fraction of
   the limit* is limit time / measured time (1.0 = at the limit). Two limits are reported:
   against the DGEMM rate (a hard upper bound, unreachable for element-wise code) and against
   the L1 ``axpy`` rate (the realistic bound of this loop structure). The forward pass alone
   (``predict``) is timed too, to split forward and reverse.

Usage::

    python benchmarks/bench_limit.py [--threads 2] [--n 100000] [--json PATH]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, limit_threads  # noqa: E402


def work_per_sample(shape, gate):
    """``{"ma": int, "exp": int, "div": int, "terms": {part: (ma, exp)}}`` for one sample."""
    H, N, K, D = shape
    T = D * (D + 1) // 2
    terms = {
        "pair products": (T, 0),
        "quadratic forms": (H * (N - 1) * T, 0),
        "softmax": (3 * H * N, H * N),
        "experts a.x": (H * N * K * D, 0),
        "residual, loss": (2, 0),
        "grad a": (H * N * K * D, 0),
        "grad M": (H * (N - 1) * T, 0),
    }
    div = H  # softmax normalisation
    if gate in ("none", "output"):
        terms["experts a.x"] = (H * N * D, 0)  # b[h, i]·x, b = Σ_k omega a
        terms["grad a"] = (H * N * D, 0)  # G[h, i] = Σ_j e g_i x
        terms["mix"] = (H * N, 0)
        terms["grad omega, coefficients"] = (H * N, 0)
        terms["grad gate"] = (3 * H * N, 0)
        if gate == "output":
            terms["output activation"] = (2, 1)
            div += 1
    elif gate == "value":
        terms["mix"] = (H * N * K + H * N, 0)
        terms["activation"] = (2 * H * N * K, H * N * K)
        terms["grad omega, coefficients"] = (3 * H * N * K, 0)
        terms["grad gate"] = (3 * H * N, 0)
        div += H * N * K
    elif gate == "sdpa":
        terms["mix"] = (H * N * K + H * K, 0)
        terms["activation"] = (2 * H * K, H * K)
        terms["grad omega, coefficients"] = (2 * H * N * K + 3 * H * K, 0)
        terms["grad gate"] = (2 * H * N * K + 2 * H * N, 0)
        div += H * K
    else:
        raise ValueError(f"unknown gate {gate!r}")
    return {"ma": sum(v[0] for v in terms.values()),
            "exp": sum(v[1] for v in terms.values()), "div": div, "terms": terms}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--gates", default="none,value,sdpa")
    ap.add_argument("--shapes", default="1,2,3,2;2,3,3,4;4,4,4,8")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--no-wait", action="store_true")
    return ap.parse_args(argv)


def _best(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def machine_rates(threads, quick=False):
    """Measured throughput: DGEMM flop/s, L1 axpy MA/s, exp/s (all with ``threads``)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from numba import njit, prange

    rates = {}
    m = 1024 if quick else 2048
    A = np.random.default_rng(0).normal(size=(m, m))
    B = np.random.default_rng(1).normal(size=(m, m))
    A @ B
    t = _best(lambda: A @ B, 3 if quick else 5)
    rates["dgemm_flops"] = 2.0 * m ** 3 / t

    @njit(parallel=True, fastmath={"contract"})
    def axpy_rows(x, y, reps):
        # every thread owns rows of an L1-resident (rows, 512) block; y += a x, 8 rows at once
        R, L = x.shape
        for r in prange(R):
            xr = x[r]
            yr = y[r]
            for _ in range(reps):
                for t in range(L):
                    yr[t] += 1.0000001 * xr[t]
        return y[0, 0]

    rows = 8 * threads
    xa = np.random.default_rng(2).normal(size=(rows, 512))
    ya = np.zeros_like(xa)
    reps = 2000 if quick else 10000
    axpy_rows(xa, ya, 1)
    t = _best(lambda: axpy_rows(xa, ya, reps), 5)
    rates["axpy_ma"] = rows * 512 * reps / t

    # exp: one L2-resident array per thread, np.exp releases the GIL
    L, reps = 16384, 100 if quick else 400
    arrs = [np.random.default_rng(3 + i).uniform(-30, 0, L) for i in range(threads)]
    outs = [np.empty(L) for _ in range(threads)]

    def run(i):
        for _ in range(reps):
            np.exp(arrs[i], out=outs[i])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, range(threads)))
        t = _best(lambda: list(pool.map(run, range(threads))), 5)
    rates["numpy_exp"] = threads * L * reps / t

    try:
        from hmoe_estim.kernels.vexp import exp_block

        @njit(parallel=True)
        def kexp(x, out, reps):
            R, L = x.shape
            for r in prange(R):
                for _ in range(reps):
                    exp_block(x[r], out[r], L)
            return out[0, 0]

        xs = np.random.default_rng(5).uniform(-30, 0, size=(threads * 8, 1024))
        os_ = np.empty_like(xs)
        kexp(xs, os_, 1)
        t = _best(lambda: kexp(xs, os_, 200), 5)
        rates["kernel_exp"] = xs.size * 200 / t
    except ImportError:
        rates["kernel_exp"] = None
    return rates


def main(argv=None):
    args = parse_args(argv)
    limit_threads(args.threads)

    import numpy as np
    import peers as P
    from _common import environment, format_table, time_interleaved, wait_for_quiet

    apply_runtime_limits(args.threads)
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.objective import predict

    if not args.no_wait:
        wait_for_quiet(max_wait=60)
    # the machine's best: measured twice (before and after the kernels, see below) and the
    # larger rate kept, so that a burst of outside load does not lower the limit
    rates = machine_rates(args.threads, args.quick)
    print(f"bench_limit: threads={args.threads}, n={args.n}")
    shapes = [tuple(int(v) for v in sh.split(",")) for sh in args.shapes.split(";")]
    if args.quick:
        shapes = [(2, 3, 3, 4)]
    rows, out, cases = [], [], []
    for shape in shapes:
        H, N, K, D = shape
        X, y, theta = P.make_case(shape, args.n, seed=3)
        XT = np.ascontiguousarray(X.T)
        for gate in args.gates.split(","):
            w = work_per_sample(shape, gate)
            fg = P.make_hmoe(X, y, shape, gate, "sigmoid")
            gc, ac = GATE_CODES[gate], ACTIVATION_CODES["sigmoid"]
            if not args.no_wait:
                wait_for_quiet(max_wait=30)
            t = time_interleaved(
                {"fg": lambda: fg(theta),
                 "fwd": lambda: predict(theta, XT, H, N, K, D, gc, ac)},
                min_repeats=5, min_time=0.2 if args.quick else 1.0, settle=0.0)
            cases.append((shape, gate, w, t))
    if not args.no_wait:
        wait_for_quiet(max_wait=60)
    again = machine_rates(args.threads, args.quick)
    rates = {k: (max(v, again[k]) if v is not None and again[k] is not None else v)
             for k, v in rates.items()}
    exp_rate = rates["numpy_exp"]
    if rates.get("kernel_exp"):
        exp_rate = max(exp_rate, rates["kernel_exp"])
    print(f"  DGEMM {rates['dgemm_flops'] / 1e9:.1f} GFLOP/s "
          f"({rates['dgemm_flops'] / 2e9:.1f} G multiply-adds/s); "
          f"L1 axpy loop {rates['axpy_ma'] / 1e9:.1f} G MA/s; "
          f"numpy exp {rates['numpy_exp'] / 1e9:.2f} G/s"
          + (f"; kernel exp_block {rates['kernel_exp'] / 1e9:.2f} G/s"
             if rates.get("kernel_exp") else ""))
    for shape, gate, w, t in cases:
        per = t["fg"]["median"] / args.n
        fwd = t["fwd"]["median"] / args.n
        lim_peak = w["ma"] * 2 / rates["dgemm_flops"] + w["exp"] / exp_rate
        lim_l1 = w["ma"] / rates["axpy_ma"] + w["exp"] / exp_rate
        rec = {"shape": list(shape), "gate": gate, "ma": w["ma"], "exp": w["exp"],
               "div": w["div"], "ns_per_sample": per * 1e9,
               "forward_ns_per_sample": fwd * 1e9,
               "limit_dgemm_ns": lim_peak * 1e9, "limit_l1_ns": lim_l1 * 1e9,
               "fraction_dgemm": lim_peak / per, "fraction_l1": lim_l1 / per,
               "achieved_gflops": 2 * w["ma"] / per / 1e9,
               "terms": {k: list(v) for k, v in w["terms"].items()},
               "external_load": t["_external_load"]}
        out.append(rec)
        rows.append([",".join(map(str, shape)), gate, w["ma"], w["exp"],
                     f"{per * 1e9:.1f}", f"{fwd / per:.0%}",
                     f"{rec['achieved_gflops']:.1f}", f"{lim_peak * 1e9:.2f}",
                     f"{rec['fraction_dgemm']:.1%}", f"{lim_l1 * 1e9:.2f}",
                     f"{rec['fraction_l1']:.1%}",
                     "?" if rec["external_load"] is None else f"{rec['external_load']:.2f}"])
    print(format_table(["H,N,K,D", "gate", "MA/sample", "exp/sample", "kernel ns/sample",
                        "forward share", "GFLOP/s", "limit ns (DGEMM)", "fraction",
                        "limit ns (L1 axpy)", "fraction", "load"], rows))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"benchmark": "bench_limit", "threads": args.threads, "n": args.n,
                       "rates": rates, "cases": out, "environment": environment()}, fh,
                      indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
