"""Time of one Gauss–Newton pass of the layer fit (``kernels.layer_sums``), two checkouts side by
side in one run.

Each checkout (``--old``, e.g. ``git worktree add /tmp/old <commit>``; ``--new``, default this
checkout) runs in a fresh process on the same data (``n`` token matrices, H heads, N tokens, d =
d_v = d_out, the value gate) with 1 and 2 Numba threads; the pass is timed after a compiling
call, best of ``--repeat``. The new checkout also times the variable projection's reduced pass
(``VarProLayerProblem.passes().sums``: head outputs, the ``W_O`` solve, the full sums and the
Schur complement).

    python benchmarks/bench_layer_sums.py --old /tmp/old [--n 10000] [--repeat 5]
"""

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, sys, time
import numpy as np
from numba import set_num_threads
from hmoe_estim.kernels import layer_sums
from hmoe_estim.layer import random_attention_layer, make_attention_regression, LayerProblem
n, H, N, d, repeat = (int(v) for v in sys.argv[1:6])
truth = random_attention_layer(H, d, d, random_state=0)
X, Y = make_attention_regression(n, truth, n_tokens=N, gate="value", noise=0.1,
                                 random_state=1)
args = truth.layout.kernel_args("value", "sigmoid", "all")
theta = truth.layout.pack(truth) + 0.05
y = Y.ravel()
out = {"P": truth.layout.n_params}
for threads in (1, 2):
    set_num_threads(threads)
    layer_sums(theta, X[:64], y[:64 * N * d], 0.0, *args)
    best = cpu = np.inf
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        layer_sums(theta, X, y, 0.0, *args)
        best = min(best, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    out[f"sums_{threads}"] = best
    out[f"cpu_{threads}"] = cpu
    try:
        from hmoe_estim.layer._varpro import VarProLayerProblem
    except ImportError:
        continue
    lo, up = LayerProblem.default_box(truth.layout)
    problem = VarProLayerProblem(X, Y, truth.layout, "value", "sigmoid", lo, up)
    passes = problem.passes()
    beta = problem.beta(theta)
    passes.sums(beta, 0.0)
    best = np.inf
    for k in range(repeat):
        b = beta + 1e-9 * (k + 1)  # a new point: no cached solve
        t0 = time.perf_counter()
        passes.sums(b, 0.0)
        best = min(best, time.perf_counter() - t0)
    out[f"varpro_{threads}"] = best
print(json.dumps(out))
"""


def _run(path, argv, cache_dir=None):
    env = dict(os.environ, PYTHONPATH=path, NUMBA_NUM_THREADS="2", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    if cache_dir:  # compile the other checkout's kernels outside its tree
        env["NUMBA_CACHE_DIR"] = cache_dir
    res = subprocess.run([sys.executable, "-c", _CHILD, *map(str, argv)], env=env, cwd=path,
                         capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--d", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--old", required=True,
                    help="the checkout to compare with (e.g. git worktree add /tmp/old HEAD~3)")
    ap.add_argument("--new", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args()
    argv = (a.n, a.heads, a.tokens, a.d, a.repeat)
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for k in range(a.rounds):  # alternated: a shared machine's load hits both alike
            rows.append((f"old #{k + 1}", _run(a.old, argv, cache)))
            rows.append((f"new #{k + 1}", _run(a.new, argv)))
    print(f"layer_sums, value gate, n={a.n}, H={a.heads}, N={a.tokens}, d=d_v=d_out={a.d}, "
          f"P={rows[0][1]['P']}; best of {a.repeat} (seconds; cpu: process time)")
    keys = ("sums_1", "cpu_1", "sums_2", "cpu_2", "varpro_1", "varpro_2")
    print(f"{'checkout':<8} " + " ".join(f"{k:>10}" for k in keys))
    for label, r in rows:
        cells = [r.get(k) for k in keys]
        print(f"{label:<8} " + " ".join(f"{c:>10.4f}" if c is not None else f"{'-':>10}"
                                        for c in cells))


if __name__ == "__main__":
    main()
