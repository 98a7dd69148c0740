"""Solver benchmark: certified failures, wall time and kernel passes of three fitting methods.

A suite of known truths ``G*`` (``K* = 2``; ``H* = H``, ``N* = N``, ``D`` on the grid of
``--shapes``; gates none/value/sdpa × activations sigmoid/tanh/gelu/silu — one activation for
the ungated MHA, which has none; fitted with the true ``H``, ``N`` and ``K = K*`` or
``K = K* + 1``; several seeds; ``n`` on a grid), each fitted by

- ``lbfgs``: ``HMoERegressor(solver="lbfgs")`` — 4 random L-BFGS-B starts (the earlier
  default);
- ``trf``: ``scipy.optimize.least_squares(method="trf")`` from the same 4 starts, with the
  explicit n × P Jacobian of :func:`hmoe_estim.kernels.jacobian.jacobian_matrix` (the same
  derivatives as the fused kernel) and the same box; best of the 4;
- ``lm``: ``HMoERegressor()`` with the new defaults (``solver="lm"``, racing).

Design of the truths suite (default ``--shapes full``): every shape ``(H, N, D)`` with
``H`` in {1, 2}, ``N`` in {2, 3}, ``D`` in {2, 3, 4} (12 shapes), ``--seeds`` truths per shape
and ``n`` (a new truth and data set for each seed and ``n``; default 2), ``n`` in ``--n``
(default 10^3, 10^4); in addition ``--large-seeds`` truths (default 2) at ``n = --large-n``
(default 10^5) for the shapes of ``--large-shapes`` (default the smallest, ``1x2x2``). With
the defaults each (gate, activation, K) group has 12 × 2 × 2 + 2 = 50 fits, 900 in all (about
75 min for ``lm`` alone at one thread on the project's 2-core machine). ``--first-seed S``
numbers the seeds from ``S``: a run with ``--first-seed 2`` fits two new truths per shape and
``n`` (and at the large ``n``), so that with a default run it makes 100 fits per group, the
design of ``benchmarks/results/solver_suite.json``. ``--shapes small``
is an earlier, narrower design (``H = 1``, ``N = 2``, ``D = 2 + seed mod
2``, one truth per seed for every ``n``, no large ``n``); ``--shapes`` also takes a list such
as ``1x2x2,2x3x4`` (``HxNxD``).

Certificate: with ``K >= K*`` the truth is feasible (for ``K = K* + 1`` embedded with an extra
zero-weight channel), so a fit whose objective exceeds the truth's objective by more than
``--cert-tol`` (in units of ``σ²/n``) is a *certified optimisation failure*. Reported per
(gate, activation, K) group and overall: number of fits, certified failures, failure rate with
its one-sided 95% Clopper–Pearson upper bound, median wall time per fit, median kernel passes
per fit (objective+gradient evaluations for L-BFGS-B; Jacobian + forward passes for LM and trf,
abandoned race candidates included); a second table gives the same per shape. The JSON keeps
every case (shape, seeds, ``n``, per method: objective, excess over the truth in ``σ²/n``,
wall, passes, starts); it is rewritten after every fit, so an interrupted run keeps its cases.

``--suite tanh`` fits the hard case ``D = 2``, ``K = K* = 2``, tanh, value gate, ``σ = 0.05``
(use ``--n 20000``) with ``lbfgs`` and ``lm``, and counts the starts that reach the truth's
objective. ``--suite preset`` instead fits the quick preset's configuration (``D = 3``, ``K* = 2``
fitted
with ``K = 3``, sigmoid, ``σ = 0.1``, gates none/value/sdpa, the preset's truth) with
``lbfgs`` and ``lm`` over replications of the data, at the ``--n`` values.

``--suite wide`` (method ``lm`` only by default) widens the design: gates
none/value/sdpa/output × activations sigmoid/tanh/gelu/silu (16 groups; for the ungated MHA the
4 labels only name 4 groups of fits on different truths), ``--fits-per-group`` fits per group
(default 24, 384 fits), each on a *fresh* truth ``random_measure(H, N, 2, D, scale=s)`` with
``s ~ U(1, 3)`` (``--scale-range``; redrawn with the next seed if the separation cannot be
reached), the factors ``K`` in {K*, K* + 1}, ``N`` in ``--tokens`` (2, 3, 4), ``D`` in
``--features`` (2, 3, 4), ``H`` in ``--heads`` (1, 2, 3), ``n`` in ``--n`` assigned by a
balanced fractional design (:func:`wide_plan`; deterministic from ``--first-seed``). Each case
also keeps ``P``, the scale, the truth/data/fit seeds, the search rounds and the objectives of
all starts; every fit records its wall and CPU time. The report (printed and stored as
``report`` in the JSON): certified failures, rate, one-sided 95% upper bound and median time
per (gate, activation), per (H, N), per K, per n and overall; median time per bin of ``P``
with the log–log exponent of wall against ``P``; and how many certified failures had two
(three) starts agreeing. ``--shard i/k`` runs the plan items with index mod k = i (k
processes share the plan, one JSON each); ``--claim DIR`` shares it item by item instead: each
process started with the same ``DIR`` takes the next item no other has claimed, the largest
``P`` first, so that none idles while another still has long fits queued (each is pinned to
its own CPU); ``--merge A.json B.json --json OUT`` merges their files and prints the
report. ``--search KNOB=V,...`` runs ``lm`` with other search knobs (the trade-off of a
schedule: its cost against its certified failures on the same fits); the JSON records them.
``--replay-rounds A.json B.json ...`` fits nothing: it replays the recorded rounds of finished
runs as if at most 1, 2, ... rounds (or a cap growing with ``P``) had been allowed — exact,
since every round's start objectives are recorded — and prints the certified failures, the
fits ending higher, those that would warn and the share of the CPU for each cap.

Usage::

    python benchmarks/bench_solver.py --quick                     # smoke test
    python benchmarks/bench_solver.py --methods lm --threads 1 \
        --json benchmarks/results/solver_suite.json               # the full design, lm only
    python benchmarks/bench_solver.py --seeds 1 --n 1000 --large-seeds 0 --threads 1 \
        --json compare.json                  # 3 methods, 1 truth/shape
    python benchmarks/bench_solver.py --suite preset --n 10000,100000 --reps 8 --json OUT
    python benchmarks/bench_solver.py --suite wide --threads 1 --json wide.json  # 384 fits
    python benchmarks/bench_solver.py --suite wide --shard 0/2 --threads 1 --json w0.json
    python benchmarks/bench_solver.py --suite wide --shard 1/2 --threads 1 --json w1.json
    python benchmarks/bench_solver.py --merge w0.json w1.json --json wide.json
    python benchmarks/bench_solver.py --suite wide --claim claims --threads 1 --json c0.json &
    python benchmarks/bench_solver.py --suite wide --claim claims --threads 1 --json c1.json
    python benchmarks/bench_solver.py --merge c0.json c1.json --json wide.json
    python benchmarks/bench_solver.py --suite wide --heads 2 --gates none --threads 1 \
        --search rounds=1,race_iter=10 --json cheap.json   # a cheaper schedule, same fits
    python benchmarks/bench_solver.py --replay-rounds wide.json   # fewer rounds, replayed
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _threads import apply_runtime_limits, limit_threads  # noqa: E402

GATE_ACTS = {"none": ["sigmoid"], "value": ["sigmoid", "tanh", "gelu", "silu"],
             "sdpa": ["sigmoid", "tanh", "gelu", "silu"]}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--suite", choices=["truths", "preset", "tanh", "wide"], default="truths")
    ap.add_argument("--n", default="1000,10000", help="sample sizes, comma-separated")
    ap.add_argument("--seeds", type=int, default=2,
                    help="truths per shape and n (truths suite; 2)")
    ap.add_argument("--shapes", default="full",
                    help="truths suite: 'full' (H 1-2 x N 2-3 x D 2-4), 'small' (H=1, N=2, "
                         "D 2-3) or a list HxNxD,... (full)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="truths suite: seeds first-seed, ..., first-seed + seeds - 1 (also for "
                         "--large-seeds): new truths that extend a design run with the same "
                         "options (0)")
    ap.add_argument("--large-n", type=int, default=100_000,
                    help="truths suite: the extra, large n (100000)")
    ap.add_argument("--large-shapes", default="1x2x2",
                    help="truths suite: shapes HxNxD,... fitted at --large-n too (1x2x2)")
    ap.add_argument("--large-seeds", type=int, default=2,
                    help="truths suite: truths per large shape at --large-n (2; 0: none)")
    ap.add_argument("--gate-acts", default=None,
                    help="truths and wide suites: only these groups, e.g. value:tanh,sdpa:gelu")
    ap.add_argument("--fits-per-group", type=int, default=24,
                    help="wide suite: fits per (gate, activation) group (24)")
    ap.add_argument("--heads", default="1,2,3", help="wide suite: values of H (1,2,3)")
    ap.add_argument("--tokens", default="2,3,4", help="wide suite: values of N (2,3,4)")
    ap.add_argument("--features", default="2,3,4", help="wide suite: values of D (2,3,4)")
    ap.add_argument("--scale-range", default="1.0,3.0",
                    help="wide suite: the truth's scale is drawn uniformly from LOW,HIGH per "
                         "fit (1.0,3.0)")
    ap.add_argument("--shard", default=None, metavar="I/K",
                    help="wide suite: run only the plan items with index %% K == I (e.g. 0/2), "
                         "so that K processes share the plan; merge with --merge")
    ap.add_argument("--claim", default=None, metavar="DIR",
                    help="wide suite: processes started with the same DIR share the plan "
                         "item by item (each takes the next item none has claimed, largest P "
                         "first, so they end together); each writes its own --json, merged "
                         "with --merge; --resume refits the item it was interrupted in")
    ap.add_argument("--merge", nargs="+", metavar="JSON", default=None,
                    help="wide suite: merge the shard files (written with --shard) into "
                         "--json and print the report; fits nothing")
    ap.add_argument("--pool", nargs="+", metavar="JSON", default=None,
                    help="wide suite: the report over the fits of several complete part files "
                         "(e.g. one per --heads) as one fractional design, with the targets "
                         "(overall <= 0.5%%, no group above 3%%); fits nothing")
    ap.add_argument("--replay-rounds", nargs="+", metavar="JSON", default=None,
                    help="wide suite: replay the recorded rounds of complete part files with "
                         "fewer rounds at most (each cap up to the most any fit ran): "
                         "certified failures, fits ending higher, fits that would warn and "
                         "the CPU share each cap would give; fits nothing")
    ap.add_argument("--reps", type=int, default=4, help="data sets per n (preset suite)")
    ap.add_argument("--methods", default=None,
                    help="lbfgs,trf,lm (the wide suite: lm)")
    ap.add_argument("--gates", default=None,
                    help="none,value,sdpa (the wide suite: none,value,sdpa,output)")
    ap.add_argument("--search", default=None, metavar="KNOB=V,...",
                    help="the lm method with other search knobs, e.g. rounds=1,race_iter=10 "
                         "or per_head=16 (the head restarts' candidates per head); knobs: "
                         + ", ".join(SEARCH_KNOBS) + " (default: the package's defaults)")
    ap.add_argument("--noise", type=float, default=0.1)
    ap.add_argument("--cert-tol", type=float, default=0.1,
                    help="certificate tolerance in units of sigma^2/n (0.1)")
    ap.add_argument("--quick", action="store_true",
                    help="2 groups, shape 1x2x2, n=1000, 1 seed: a smoke test")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--resume", action="store_true",
                    help="keep the cases already in --json (same methods and settings) and "
                         "fit only the missing ones")
    args = ap.parse_args(argv)
    wide = args.suite == "wide" or args.merge or args.pool or args.replay_rounds
    if args.methods is None:
        args.methods = "lm" if wide else "lbfgs,trf,lm"
    if args.gates is None:
        args.gates = "none,value,sdpa,output" if wide else "none,value,sdpa"
    if args.shard is not None and args.suite != "wide":
        ap.error("--shard is for the wide suite")
    if args.claim is not None and (args.suite != "wide" or args.shard or not args.json):
        ap.error("--claim is for the wide suite, with --json and without --shard")
    try:
        args.search_knobs = parse_search(args.search)  # parsed once, for every fit
    except ValueError as exc:
        ap.error(str(exc))
    return args


SEARCH_KNOBS = ("n_candidates", "race_iter", "race_samples", "rounds", "agree", "per_head")


def parse_search(text):
    """``'rounds=1,race_iter=10'`` -> ``{"rounds": 1, "race_iter": 10}`` (``None``: ``{}``)."""
    knobs = {}
    for item in (t for t in (text or "").split(",") if t):
        key, _, value = item.partition("=")
        if key not in SEARCH_KNOBS or not value.isdigit() or int(value) < 1:
            raise ValueError(f"--search: {item!r} is not KNOB=N with N >= 1 and KNOB one of "
                             f"{', '.join(SEARCH_KNOBS)}")
        knobs[key] = int(value)
    return knobs


def make_lm_search(knobs, X, y, shape, gate, act):
    """The default search with ``knobs`` changed: its own knobs set, and ``per_head`` given to
    the head restarts among the moves the schedule resolves for this problem."""
    import numpy as np

    from hmoe_estim.model import make_bounds
    from hmoe_estim.solvers import HeadRestarts, Problem, Search

    knobs = dict(knobs)
    per_head = knobs.pop("per_head", None)
    search = Search(**knobs)
    if per_head is not None:
        lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)  # unused here
        problem = Problem(np.require(X.T, requirements=["C"]), y, shape, gate, act, lower,
                          upper)
        search.moves = [HeadRestarts(per_head=per_head) if isinstance(m, HeadRestarts) else m
                        for m in search.schedule(problem).moves]
    return search


def embed_truth(G, K):
    """``G*`` as a ``K``-channel measure: extra channels get weight 0 and zero experts."""
    import numpy as np

    from hmoe_estim.model import MixingMeasure

    H, N, Kt, D = G.shape
    omega = np.zeros((H, K))
    omega[:, :Kt] = G.omega
    a = np.zeros((H, N, K, D))
    a[:, :, :Kt] = G.a
    return MixingMeasure(omega, G.M.copy(), a)


def fit_trf(X, y, shape, gate, act, starts, lower, upper):
    """Best of ``scipy.optimize.least_squares(method='trf')`` from ``starts``."""
    import numpy as np
    from scipy.optimize import least_squares

    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.jacobian import jacobian_matrix
    from hmoe_estim.kernels.objective import predict

    H, N, K, D = shape
    g, a = GATE_CODES[gate], ACTIVATION_CODES[act]
    XT = np.require(X.T, requirements=["C", "W"])
    from threadpoolctl import threadpool_limits

    # one BLAS thread, as the estimator's solvers: idle BLAS threads spinning after each
    # SVD steal the cores of the Numba kernels (measured: 10-50x slower fits without)
    with threadpool_limits(limits=1, user_api="blas"):
        return _trf_starts(least_squares, predict, jacobian_matrix, XT, y, shape, g, a,
                           starts, lower, upper)


def _trf_starts(least_squares, predict, jacobian_matrix, XT, y, shape, g, a, starts, lower,
                upper):
    import numpy as np

    H, N, K, D = shape
    passes = 0
    best = None
    for t0 in starts:
        res = least_squares(
            lambda t: predict(t, XT, H, N, K, D, g, a) - y, t0,
            jac=lambda t: jacobian_matrix(t, XT, H, N, K, D, g, a),
            bounds=(lower, upper), method="trf",
        )
        passes += int(res.nfev) + int(res.njev or 0)
        obj = float(np.mean(res.fun ** 2))
        if best is None or obj < best[0]:
            best = (obj, bool(res.status > 0))
    return best[0], best[1], passes


def one_case(X, y, G, shape, gate, act, methods, noise, cert_tol, seed, keep_starts=False,
             search=None):
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.utils import check_random_state

    from hmoe_estim import HMoERegressor
    from hmoe_estim._names import ACTIVATION_CODES, GATE_CODES
    from hmoe_estim.kernels.jacobian import sum_of_squares
    from hmoe_estim.model import make_bounds, pack, random_start

    H, N, K, D = shape
    n = len(y)
    XT = np.require(X.T, requirements=["C", "W"])
    truth_obj = sum_of_squares(pack(embed_truth(G, K)), XT, y, H, N, K, D, GATE_CODES[gate],
                               ACTIVATION_CODES[act]) / n
    unit = noise ** 2 / n
    out = {"truth_objective": truth_obj, "methods": {}}
    for m in methods:
        t0, c0 = time.perf_counter(), time.process_time()
        if m == "trf":
            lower, upper = make_bounds(shape, omega_max=10.0, param_bound=10.0)
            rng = check_random_state(seed)
            xr = float(np.sqrt(np.mean(X ** 2)))
            starts = [np.clip(pack(random_start(shape, rng, x_rms=xr, y_scale=float(np.std(y)))),
                              lower, upper) for _ in range(4)]
            obj, conv, passes = fit_trf(X, y, shape, gate, act, starts, lower, upper)
            agree = starts_below = None
        else:
            solver = make_lm_search(search, X, y, shape, gate, act) if search and m == "lm" \
                else m
            est = HMoERegressor(n_heads=H, n_tokens=N, n_experts=K, gate=gate, activation=act,
                                solver=solver, random_state=seed)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                est.fit(X, y)
            obj, conv, passes = est.objective_, est.converged_, est.n_kernel_passes_
            agree = est.n_starts_agreeing_
            starts_below = int(np.sum(est.start_objectives_ <= truth_obj + cert_tol * unit))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        excess = (obj - truth_obj) / unit
        out["methods"][m] = {
            "objective": obj, "excess_sigma2_over_n": excess, "failure": bool(excess > cert_tol),
            "wall": wall, "cpu": cpu, "passes": passes, "converged": bool(conv),
            "n_starts_agreeing": agree,
            "starts_not_above_truth": starts_below,
            "n_finished": None if m == "trf" else len(est.start_objectives_),
            "search_rounds": None if m == "trf" else int(est.search_rounds_),
            "search_stop": None if m == "trf" else est.search_stop_,
            "n_rounds_agreeing": None if m == "trf" else int(est.n_rounds_agreeing_),
            # where the fit's time went: the race, the convergence, each move (wall seconds)
            "search_cost": None if m == "trf" else {
                k: {"passes": float(v["passes"]), "seconds": float(v["seconds"])}
                for k, v in est.search_cost_.items()},
        }
        if keep_starts and m != "trf":
            out["methods"][m]["start_objectives"] = [float(v) for v in est.start_objectives_]
    return out


FULL_SHAPES = [(H, N, D) for H in (1, 2) for N in (2, 3) for D in (2, 3, 4)]
SMALL_SHAPES = [(1, 2, 2), (1, 2, 3)]


def parse_shapes(text):
    """``'full'``, ``'small'`` or ``'HxNxD,...'`` -> list of ``(H, N, D)``."""
    if text == "full":
        return list(FULL_SHAPES)
    if text == "small":
        return list(SMALL_SHAPES)
    shapes = []
    for item in (t for t in text.split(",") if t):
        parts = item.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"--shapes: {item!r} is not HxNxD with positive integers "
                             "(e.g. 1x2x2); or use 'full' / 'small'")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def upper_bound(k, n, level=0.95):
    """One-sided Clopper–Pearson upper bound of a rate with ``k`` events in ``n`` trials."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def summarize(cases, methods, keys):
    import numpy as np

    groups = {}
    for c in cases:
        groups.setdefault(tuple(c[k] for k in keys), []).append(c)

    def cells(cs, m):
        rs = [c["result"]["methods"][m] for c in cs if m in c["result"]["methods"]]
        if not rs:
            return ["", "", "", "", ""]
        k = int(sum(r["failure"] for r in rs))
        return [f"{k}/{len(rs)}", f"{100 * k / len(rs):.1f}%",
                f"{100 * upper_bound(k, len(rs)):.1f}%",
                f"{np.median([r['wall'] for r in rs]):.2f}",
                f"{np.median([r['passes'] for r in rs]):.0f}"]

    rows = []
    for key, cs in sorted(groups.items(), key=lambda kv: [str(v) for v in kv[0]]):
        row = list(key) + [len(cs)]
        for m in methods:
            row += cells(cs, m)
        rows.append(row)
    totals = ["all"] + [""] * (len(keys) - 1) + [len(cases)]
    for m in methods:
        totals += cells(cases, m)
    rows.append(totals)
    header = list(keys) + ["fits"]
    for m in methods:
        header += [f"{m} fail", f"{m} rate", f"{m} 95% ub", f"{m} s", f"{m} passes"]
    return header, rows


def truths_plan(args, n_values, gates):
    """The truths suite: list of ``(gate, act, K, (H, N, D), truth_seed, data_seed, n, s)``.

    Ordered seed-major (seed, then ``n``, shape, group, ``K``), the large-``n`` cases last,
    so that an interrupted run has balanced groups.
    """
    groups = [(g, a) for g in gates for a in GATE_ACTS[g]]
    if args.gate_acts:
        want = {tuple(t.split(":")) for t in args.gate_acts.split(",") if t}
        groups = [ga for ga in groups if ga in want or (ga[0], "*") in want]
    first = args.first_seed
    shapes, seeds = parse_shapes(args.shapes), range(first, first + args.seeds)
    large = [] if args.large_seeds <= 0 else [
        (args.large_n, shp, range(first, first + args.large_seeds))
        for shp in parse_shapes(args.large_shapes)]
    if args.quick:
        groups, n_values, seeds, shapes, large = ([("value", "sigmoid"), ("sdpa", "tanh")],
                                                  [1000], range(1), [(1, 2, 2)], [])
    plan = []
    if args.shapes == "small" and not args.quick:
        # the earlier, narrower design: H = 1, N = 2,
        # D = 2 + seed mod 2, one truth per seed for every n and group, no large n
        for n in n_values:
            for gate, act in groups:
                for s in seeds:
                    for K in (2, 3):
                        plan.append((gate, act, K, (1, 2, 2 + s % 2), 1000 + s, 10_000 + s,
                                     n, s))
        return plan
    for s in seeds:
        for i_n, n in enumerate(n_values):
            for shp in shapes:
                for gate, act in groups:
                    for K in (2, 3):
                        plan.append((gate, act, K, shp, 1000 + 100 * i_n + s,
                                     10_000 + 100 * i_n + s, n, s))
    for n, shp, large_seeds in large:
        for s in large_seeds:
            for gate, act in groups:
                for K in (2, 3):
                    plan.append((gate, act, K, shp, 1900 + s, 19_000 + s, n, s))
    return plan


WIDE_ACTS = ["sigmoid", "tanh", "gelu", "silu"]


def _ints(text, name):
    try:
        vals = [int(float(v)) for v in text.split(",") if v]
    except ValueError:
        raise SystemExit(f"--{name}: {text!r} is not a comma-separated list of integers")
    if not vals:
        raise SystemExit(f"--{name}: empty")
    return vals


def _hn_cycle(heads, tokens, first_seed):
    """The fixed shuffled list of the (H, N) combinations, from ``first_seed``.

    For the 3 × 3 default, the permutation is redrawn until every residue class mod 3 of
    the list holds three different H and three different N: with 24 fits per group each
    round of the plan then fits three cells of different H and N (cheap and expensive
    fits mixed).
    """
    import numpy as np

    cells = [(h, t) for h in heads for t in tokens]
    rng = np.random.RandomState(first_seed)
    for _ in range(1000):
        order = [cells[i] for i in rng.permutation(len(cells))]
        if len(heads) != 3 or len(tokens) != 3 or all(
                len({c[0] for c in order[r::3]}) == 3 and len({c[1] for c in order[r::3]}) == 3
                for r in range(3)):
            return order
    return order


def wide_plan(args, n_values, gates):
    """The wide suite: a list of plan items (dicts), in the order of the run.

    Design: ``G`` (gate, activation) groups × ``F = --fits-per-group`` fits. Fit ``j`` of
    group ``g`` has the design counter ``c = g·F + j``; its factors are

    - ``(H, N) = L[c mod 9]``, ``L`` the fixed shuffled list of ``_hn_cycle``;
    - ``D = features[(c + c // 9) mod 3]`` (a 27-cycle: every (H, N) cell meets every D; no
      shift ``c // 9`` when the numbers of (H, N) cells and of D values are coprime);
    - ``K = K* + (c // 2 + g) mod 2``, ``n = n_values[(c // 4 + g // 2) mod len(n_values)]``
      (balanced in every group when ``F`` is a multiple of 8, in every round of the plan,
      and not confounded with (H, N) or D);
    - a fresh truth per fit: ``scale ~ U(--scale-range)``, ``truth_seed``, ``data_seed`` and
      ``fit_seed`` distinct per fit, all from ``--first-seed`` and ``c``.

    Order of the run: round-major (fit ``j`` of every group, then fit ``j + 1``), the groups
    rotated by one slot per round, so that an interrupted run has balanced groups and
    ``--shard i/2`` (plan index mod 2) takes every other fit of every group.
    """
    import math

    import numpy as np

    # every gate with the 4 activation labels (for the ungated MHA, "none", the label only
    # names 4 groups of fits on different truths: it has no activation)
    groups = [(g, a) for g in gates for a in WIDE_ACTS]
    if args.gate_acts:
        want = {tuple(t.split(":")) for t in args.gate_acts.split(",") if t}
        groups = [ga for ga in groups if ga in want or (ga[0], "*") in want]
    heads, tokens = _ints(args.heads, "heads"), _ints(args.tokens, "tokens")
    dims = _ints(args.features, "features")
    lo, hi = (float(v) for v in args.scale_range.split(","))
    hn = _hn_cycle(heads, tokens, args.first_seed)
    F, S, n_groups = args.fits_per_group, args.first_seed, len(groups)
    # D shifts by one per pass through the (H, N) list when the periods share a factor
    # (3 and 9: else D would be a function of the (H, N) cell)
    shift = int(math.gcd(len(hn), len(dims)) > 1)
    base = 1_000_000 * (S + 1)
    plan = []
    for j in range(F):
        for slot in range(n_groups):
            g = (slot + j) % n_groups
            gate, act = groups[g]
            c = g * F + j
            H, N = hn[c % len(hn)]
            D = dims[(c + shift * (c // len(hn))) % len(dims)]
            K = 2 + (c // 2 + g) % 2
            n = n_values[(c // 4 + g // 2) % len(n_values)]
            scale = float(np.random.default_rng([S, c]).uniform(lo, hi))
            plan.append({"index": len(plan), "design": c, "gate": gate, "activation": act,
                         "K": K, "H": H, "N": N, "D": D, "n": n, "scale": scale,
                         "truth_seed": base + 100 * c, "data_seed": base + 500_000 + c,
                         "fit_seed": base + 700_000 + c})
    return plan


def parse_shard(text):
    """``'i/k'`` -> ``(i, k)``; None -> ``(0, 1)``."""
    if text is None:
        return 0, 1
    try:
        i, k = (int(v) for v in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard: {text!r} is not I/K (e.g. 0/2)")
    if not (k >= 1 and 0 <= i < k):
        raise SystemExit(f"--shard: {text!r} needs K >= 1 and 0 <= I < K")
    return i, k


def _claim(path, owner):
    """Create ``path`` holding ``owner`` unless it exists (atomically); whether ``owner``
    holds it (a file being written by another process reads as another owner's)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        with open(path) as fh:
            return fh.read() == owner
    with os.fdopen(fd, "w") as fh:
        fh.write(owner)
    return True


def claim_slot(directory, owner):
    """The slot (0, 1, ...) of the process writing ``owner`` among those sharing
    ``directory`` (``--claim``): the same on a restart, the next free one for a new owner."""
    os.makedirs(directory, exist_ok=True)
    k = 0
    while not _claim(os.path.join(directory, f"slot-{k}"), os.path.abspath(owner)):
        k += 1
    return k


def claim_item(directory, index, owner):
    """Whether the process writing ``owner`` may fit plan item ``index`` (``--claim``): it
    claims an unclaimed item and keeps its own claims (an item it was interrupted in);
    another owner's item is not its."""
    return _claim(os.path.join(directory, f"item-{index}"), os.path.abspath(owner))


def draw_truth(item, max_redraws=99):
    """``random_measure`` of the item, redrawn with the next seed if the separation fails;
    returns ``(G, seed, redraws, min_separation)``.

    Some shapes of the design cannot hold their ``H·N·K`` experts at the default separation
    (``scale/4``: 24 experts in ``R²`` for ``H = 3, N = 4``); every 10 failed redraws halve
    the separation asked for, and the case records the one used."""
    from hmoe_estim import random_measure
    from hmoe_estim.datasets._generator import DEFAULT_SEPARATION_FRACTION

    sep = DEFAULT_SEPARATION_FRACTION * item["scale"]  # random_measure's default
    for r in range(max_redraws + 1):
        try:
            G = random_measure(item["H"], item["N"], 2, item["D"], scale=item["scale"],
                               min_separation=sep, random_state=item["truth_seed"] + r)
            return G, item["truth_seed"] + r, r, sep
        except ValueError as exc:
            if "Could not draw" not in str(exc) or r == max_redraws:
                raise
            if r % 10 == 9:
                sep /= 2
    raise AssertionError("unreachable")


def _rate_rows(cases, keys, method):
    """Rows ``key..., fits, failures, rate %, 95% ub %, median wall s, median CPU s`` per group
    and over all (CPU: the process's CPU time, which load from other processes does not
    inflate)."""
    import numpy as np

    def cells(cs):
        rs = [c["result"]["methods"][method] for c in cs]
        k = int(sum(r["failure"] for r in rs))
        return [len(rs), k, round(100 * k / len(rs), 2), round(100 * upper_bound(k, len(rs)), 2),
                round(float(np.median([r["wall"] for r in rs])), 3),
                round(float(np.median([r.get("cpu", np.nan) for r in rs])), 3)]

    groups = {}
    for c in cases:
        groups.setdefault(tuple(c[k] for k in keys), []).append(c)
    rows = [list(key) + cells(cs) for key, cs in sorted(groups.items())]
    if cases:
        rows.append(["all"] + [""] * (len(keys) - 1) + cells(cases))
    return [list(keys) + ["fits", "failures", "rate %", "95% ub %", "median s",
                          "median cpu s"]] + rows


def _phase_rows(cases, keys, method):
    """Rows ``key..., fits, % of the search's seconds`` in each phase of ``search_cost``: the
    race, the kept starts' convergence on all the data and each move (proposals under
    ``propose``), per group and over all; fits without a ``search_cost`` record are left out."""
    groups = {}
    for c in cases:
        cost = c["result"]["methods"][method].get("search_cost")
        if cost:
            groups.setdefault(tuple(c[k] for k in keys), []).append(cost)
    seen = {p for costs in groups.values() for cost in costs for p in cost}
    phases = [p for p in ("race", "converge") if p in seen] + sorted(seen - {"race",
                                                                               "converge"})

    def cells(costs):
        tot = {p: sum(cost.get(p, {}).get("seconds", 0.0) for cost in costs) for p in phases}
        whole = sum(tot.values()) or 1.0
        return [len(costs)] + [round(100 * tot[p] / whole, 1) for p in phases]

    rows = [list(key) + cells(costs) for key, costs in sorted(groups.items())]
    if groups:
        rows.append(["all"] + [""] * (len(keys) - 1)
                    + cells([c for costs in groups.values() for c in costs]))
    return [list(keys) + ["fits"] + [f"{p} %" for p in phases]] + rows


P_BINS = [0, 20, 40, 80, 160, 320, 10 ** 9]


def wide_report(cases, method="lm"):
    """The wide suite's report (a JSON-able dict of tables and numbers)."""
    import numpy as np

    cases = [c for c in cases if method in c["result"]["methods"]]
    rep = {"method": method, "fits": len(cases)}
    if not cases:
        return rep
    rep["groups"] = _rate_rows(cases, ["gate", "activation"], method)
    rep["HN"] = _rate_rows(cases, ["H", "N"], method)
    rep["K"] = _rate_rows(cases, ["K"], method)
    rep["n"] = _rate_rows(cases, ["n"], method)
    overall = rep["K"][-1]
    rep["overall"] = dict(zip(rep["K"][0][1:], overall[1:]))
    P = np.array([c["P"] for c in cases], dtype=float)
    wall = np.array([c["result"]["methods"][method]["wall"] for c in cases])
    fail = np.array([c["result"]["methods"][method]["failure"] for c in cases])
    cpu = np.array([c["result"]["methods"][method].get("cpu", np.nan) for c in cases])
    rows = [["P bin", "fits", "median P", "median s", "median cpu s", "failures"]]
    for lo, hi in zip(P_BINS[:-1], P_BINS[1:]):
        sel = (P >= lo) & (P < hi)
        if sel.any():
            label = f"{lo}-{hi - 1}" if hi < 10 ** 9 else f">={lo}"
            rows.append([label, int(sel.sum()), float(np.median(P[sel])),
                         round(float(np.median(wall[sel])), 3),
                         round(float(np.median(cpu[sel])), 3), int(fail[sel].sum())])
    fit = {"table": rows, "exponent": None, "intercept": None, "exponent_by_n": {},
           "exponent_cpu": None}
    ok = wall > 0
    if len(set(P[ok])) >= 2:
        b, a = np.polyfit(np.log(P[ok]), np.log(wall[ok]), 1)
        fit["exponent"], fit["intercept"] = float(b), float(a)
        okc = ok & (cpu > 0)
        if len(set(P[okc])) >= 2:
            fit["exponent_cpu"] = float(np.polyfit(np.log(P[okc]), np.log(cpu[okc]), 1)[0])
    for n in sorted({c["n"] for c in cases}):
        sel = ok & np.array([c["n"] == n for c in cases])
        if len(set(P[sel])) >= 2:
            fit["exponent_by_n"][str(n)] = float(np.polyfit(np.log(P[sel]), np.log(wall[sel]),
                                                             1)[0])
    rep["wall_vs_P"] = fit
    rep["phases"] = _phase_rows(cases, ["H", "gate", "activation"], method)
    fails = [c["result"]["methods"][method] for c in cases if c["result"]["methods"][method][
        "failure"]]
    rep["failures_with_agreement"] = {
        "failures": len(fails),
        "agreeing_ge2": sum((r["n_starts_agreeing"] or 0) >= 2 for r in fails),
        "agreeing_ge3": sum((r["n_starts_agreeing"] or 0) >= 3 for r in fails),
        # agreement between independent rounds (records of the search that counts it)
        "rounds_agreeing_ge2": sum((r.get("n_rounds_agreeing") or 0) >= 2 for r in fails),
    }
    return rep


def print_wide_report(rep, format_table):
    if not rep.get("fits"):
        print("no fits")
        return
    for name, title in [("groups", "per (gate, activation)"), ("HN", "per (H, N)"),
                        ("K", "per K"), ("n", "per n")]:
        print(f"\n{rep['method']}, {title}:")
        print(format_table(rep[name][0], rep[name][1:]))
    w = rep["wall_vs_P"]
    print("\nwall per fit against P (free parameters):")
    print(format_table(w["table"][0], w["table"][1:]))
    if w["exponent"] is not None:
        by_n = ", ".join(f"n={k}: {v:.2f}" for k, v in w["exponent_by_n"].items())
        print(f"log-log fit over all fits: wall ~ P^{w['exponent']:.2f}"
              + (f" (per n: {by_n})" if by_n else "")
              + (f"; CPU time ~ P^{w['exponent_cpu']:.2f}" if w["exponent_cpu"] else ""))
    ph = rep.get("phases", [])
    if len(ph) > 1:
        print("\nwhere the search's seconds go (% per phase; fits that record search_cost):")
        print(format_table(ph[0], ph[1:]))
    o, fa = rep["overall"], rep["failures_with_agreement"]
    print(f"\noverall: {o['failures']}/{o['fits']} certified failures, rate {o['rate %']}%, "
          f"95% upper bound {o['95% ub %']}%, median {o['median s']} s per fit")
    print(f"failures with agreement: {fa['agreeing_ge2']} of {fa['failures']} with >= 2 starts "
          f"agreeing, {fa['agreeing_ge3']} with >= 3; "
          f"{fa.get('rounds_agreeing_ge2', 0)} with >= 2 rounds agreeing")


WIDE_META_KEYS = ("benchmark", "suite", "n", "methods", "noise", "cert_tol", "K_true", "gates",
                  "gate_acts", "fits_per_group", "first_seed", "heads", "tokens", "features",
                  "scale_range", "plan_size", "search")


def _wide_meta(args, n_values, gates, methods, plan_size):
    """The settings of a wide-suite file (equal in files that --resume or --merge accept)."""
    return {"benchmark": "bench_solver", "suite": "wide", "n": n_values, "methods": methods,
            "noise": args.noise, "cert_tol": args.cert_tol, "K_true": 2, "gates": gates,
            "gate_acts": args.gate_acts, "fits_per_group": args.fits_per_group,
            "first_seed": args.first_seed, "heads": args.heads, "tokens": args.tokens,
            "features": args.features, "scale_range": args.scale_range,
            "plan_size": plan_size, "search": args.search}


def _write_json(path, data):
    with open(path + ".tmp", "w") as fh:
        json.dump(data, fh, indent=1, default=float)
    os.replace(path + ".tmp", path)


def run_wide(args, n_values, gates, methods):
    from _common import environment, format_table

    from hmoe_estim import make_hmoe_regression
    from hmoe_estim.model import n_params

    plan = wide_plan(args, n_values, gates)
    shard_i, shard_k = parse_shard(args.shard)
    mine = [it for it in plan if it["index"] % shard_k == shard_i]
    meta = {**_wide_meta(args, n_values, gates, methods, len(plan)), "shard": args.shard}
    if args.claim:
        # the costliest fits first: the processes sharing the plan then end together
        mine.sort(key=lambda it: (-n_params(it["H"], it["N"], it["K"], it["D"]), -it["n"]))
        meta["claim"] = os.path.abspath(args.claim)
        os.makedirs(args.claim, exist_ok=True)
        print(f"bench_solver: suite=wide, {len(plan)} fits shared through {args.claim} "
              f"x methods {methods}, threads={args.threads}", flush=True)
    else:
        print(f"bench_solver: suite=wide, {len(mine)} of {len(plan)} fits (shard "
              f"{shard_i}/{shard_k}) x methods {methods}, threads={args.threads}", flush=True)
    env = environment()
    cases, done = [], {}
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as fh:
            old = json.load(fh)
        if any(old.get(k) != v for k, v in meta.items()):
            raise SystemExit(f"--resume: {args.json} was written with other settings; "
                             "drop --resume or write to another file")
        done = {c["index"]: c for c in old["cases"]}
        print(f"resuming: {len(done)} cases already in {args.json}", flush=True)

    t_start = time.perf_counter()

    def dump(report=None):
        if args.json:
            # cases of the file not reached yet stay in it: an interrupted resume loses none
            reached = {c["index"] for c in cases}
            waiting = [done[it["index"]] for it in mine
                       if it["index"] in done and it["index"] not in reached]
            _write_json(args.json, {**meta, "complete": report is not None,
                                    "cases": cases + waiting, "report": report,
                                    "environment": env,
                                    "total_seconds": time.perf_counter() - t_start})

    for i, it in enumerate(mine):
        if it["index"] in done:
            cases.append(done[it["index"]])
            continue
        if args.claim and not claim_item(args.claim, it["index"], args.json):
            continue  # another process's
        H, N, K, D, n = it["H"], it["N"], it["K"], it["D"], it["n"]
        G, truth_seed, redraws, sep = draw_truth(it)
        X, y = make_hmoe_regression(n, measure=G, gate=it["gate"], activation=it["activation"],
                                    noise=args.noise, random_state=it["data_seed"])
        res = one_case(X, y, G, (H, N, K, D), it["gate"], it["activation"], methods,
                       args.noise, args.cert_tol, seed=it["fit_seed"], keep_starts=True,
                       search=args.search_knobs)
        case = {**it, "K_true": 2, "P": n_params(H, N, K, D), "truth_seed": truth_seed,
                "truth_seed_planned": it["truth_seed"], "truth_redraws": redraws,
                "min_separation": sep, "shape": f"{H}x{N}x{D}", "result": res}
        cases.append(case)
        line = "  ".join(f"{m}: {r['excess_sigma2_over_n']:+9.1f} {r['wall']:6.2f}s "
                         f"(cpu {r['cpu']:6.2f}s) {r['passes']:5d}p r{r['search_rounds']} "
                         f"a{r['n_starts_agreeing']}"
                         f"{' FAIL' if r['failure'] else ''}"
                         for m, r in res["methods"].items())
        print(f"[{i + 1}/{len(mine)} #{it['index']} {time.perf_counter() - t_start:6.0f}s] "
              f"{it['gate']:6s} {it['activation']:7s} K={K} H={H} N={N} D={D} n={n:6d} "
              f"P={case['P']:3d} s={it['scale']:.2f}{' redraw' if redraws else ''}  {line}",
              flush=True)
        dump()
    cases.sort(key=lambda c: c["index"])
    rep = wide_report(cases, methods[-1] if "lm" not in methods else "lm")
    print_wide_report(rep, format_table)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    if args.json:
        dump(rep)
        print(f"wrote {args.json}")
    return 0


def merge_wide(args):
    """Merge the JSON files of ``--shard`` runs into ``--json``; print the report.

    The merge is complete when its files together hold every plan item (a record exists only
    for a finished fit): a resumed file with holes and the runs that filled them merge into a
    finished part."""
    from _common import format_table

    metas, cases = [], {}
    for path in args.merge:
        with open(path) as fh:
            data = json.load(fh)
        if data.get("suite") != "wide":
            raise SystemExit(f"--merge: {path} is not a wide-suite file")
        metas.append(data)
        for c in data["cases"]:
            if c["index"] in cases and cases[c["index"]]["result"] != c["result"]:
                raise SystemExit(f"--merge: plan item {c['index']} differs between files")
            cases[c["index"]] = c
    keys = WIDE_META_KEYS
    first = {k: metas[0].get(k) for k in keys}
    for path, m in zip(args.merge[1:], metas[1:]):
        diff = [k for k in keys if m.get(k) != first[k]]
        if diff:
            raise SystemExit(f"--merge: {path} differs from {args.merge[0]} in {diff}")
    cases = [cases[i] for i in sorted(cases)]
    covered = [c["index"] for c in cases] == list(range(first["plan_size"]))
    methods = first["methods"]
    rep = wide_report(cases, "lm" if "lm" in methods else methods[-1])
    print(f"merged {len(args.merge)} files: {len(cases)} of {first['plan_size']} plan items"
          f"{'' if covered else ' (INCOMPLETE)'}")
    print_wide_report(rep, format_table)
    if args.json:
        _write_json(args.json, {**first, "shard": None, "merged_from": list(args.merge),
                                "complete": covered, "cases": cases,
                                "report": rep, "environment": metas[0].get("environment"),
                                "total_seconds": sum(m.get("total_seconds") or 0
                                                     for m in metas)})
        print(f"wrote {args.json}")
    return 0


#: The wide suite's targets: overall certified failures, and the most in any group (%).
TARGET_OVERALL, TARGET_GROUP = 0.5, 3.0


def _finished_wide(path, option):
    """The data of a finished wide-suite file; ``SystemExit`` naming ``option`` otherwise."""
    with open(path) as fh:
        data = json.load(fh)
    if data.get("suite") != "wide" or not data.get("complete"):
        raise SystemExit(f"{option}: {path} is not a finished wide-suite run (finish it with "
                         "--resume)")
    return data


def pool_wide(args):
    """The report over the cases of several complete part files (``--pool``)."""
    from _common import format_table

    cases, parts = [], []
    for path in args.pool:
        data = _finished_wide(path, "--pool")
        parts.append(f"{path}: heads {data['heads']}, gates {','.join(data['gates'])}, "
                     f"{len(data['cases'])} fits")
        cases += data["cases"]
    print("pooled parts:\n  " + "\n  ".join(parts))
    rep = wide_report(cases, "lm")
    print_wide_report(rep, format_table)
    # rows: two keys, fits, failures, rate %, ...; the header and the "all" row left out
    over = [f"{r[0]}/{r[1]} ({r[3]}/{r[2]})" for name in ("groups", "HN")
            for r in rep[name][1:-1] if r[4] > TARGET_GROUP]
    ok = rep["overall"]["rate %"] <= TARGET_OVERALL
    print(f"\ntargets: overall {rep['overall']['rate %']}% "
          f"{'<=' if ok else '>'} {TARGET_OVERALL}%; groups above {TARGET_GROUP}%: "
          f"{', '.join(over) if over else 'none'}")
    if args.json:
        _write_json(args.json, {"benchmark": "bench_solver", "suite": "wide-pooled",
                                "pooled_from": list(args.pool), "report": rep,
                                "targets": {"overall_ok": ok, "groups_above": over}})
        print(f"wrote {args.json}")
    return 0


def replay_round_cap(m, n, cap, agree=2):
    """Replay one recorded ``lm`` fit with at most ``cap`` rounds: ``(objective, rounds,
    rounds agreeing)``, or ``None`` when its start objectives do not split into its rounds.

    The rounds stop once ``agree`` of them reach the best objective (the package's
    :func:`~hmoe_estim.solvers.count_agreeing`, ``σ̂²/n`` with ``n`` samples), as the search
    does; each round's best is the lowest of its recorded start objectives (its moves
    included). Exact for a cap up to the rounds the fit was allowed, on noisy data (the
    search's rounding-level floor, for noiseless targets, is not recorded).
    """
    import numpy as np

    from hmoe_estim.solvers import count_agreeing

    s = np.asarray(m["start_objectives"], dtype=float)
    rounds = int(m["search_rounds"])
    if rounds < 1 or s.size % rounds:
        return None
    best = []
    for group in s.reshape(rounds, -1)[:cap]:
        best.append(float(group.min()))
        agreeing = count_agreeing(best, n)
        if agreeing >= agree:
            break
    return min(best), len(best), agreeing


def replay_rounds(args):
    """``--replay-rounds``: what each cap on the rounds would have given on recorded fits."""
    from _common import format_table

    cases, skipped = [], 0
    for path in args.replay_rounds:
        data = _finished_wide(path, "--replay-rounds")
        agree = int((data.get("search") or {}).get("agree", 2))
        for c in data["cases"]:
            m = c["result"]["methods"].get("lm")
            if m is None or "start_objectives" not in m:
                skipped += 1
                continue
            cases.append((c, m, data["noise"] ** 2 / c["n"], data["cert_tol"], agree))
    if not cases:
        raise SystemExit("--replay-rounds: no lm fit with its start objectives in these files")
    most = max(int(m["search_rounds"]) for _, m, *_ in cases)
    cpu_all = sum(m["cpu"] for _, m, *_ in cases)

    def row(cap_of_p):
        fails = higher = warn = n_fits = 0
        cpu = 0.0
        for c, m, unit, tol, agree in cases:
            got = replay_round_cap(m, c["n"], cap_of_p(c["P"]), agree)
            if got is None:
                continue
            obj, rounds, agreeing = got
            n_fits += 1
            truth = m["objective"] - m["excess_sigma2_over_n"] * unit
            fails += (obj - truth) / unit > tol
            higher += (obj - m["objective"]) / unit > tol
            warn += rounds > 1 and agreeing < agree
            cpu += m["cpu"] * rounds / int(m["search_rounds"])
        return [n_fits, fails, higher, warn, round(cpu / cpu_all, 3)]

    head = ["fits", "cert. fails", "higher", "would warn", "CPU share"]
    rows = [["most rounds", *head]]
    rows += [[cap, *row(lambda P, cap=cap: cap)] for cap in range(1, most + 1)]
    # caps that grow with the number of parameters P, from 2 up to the recorded most
    by_p = [[f"max(2, ceil(P/{d}))", *row(lambda P, d=d: min(most, max(2, -(-P // d))))]
            for d in (15, 20, 25, 30, 40)]
    print(f"replayed {len(cases)} recorded fits of {len(args.replay_rounds)} file(s)"
          f"{f' ({skipped} without start objectives left out)' if skipped else ''}; "
          "'higher': ends above the recorded fit by more than the certificate's tolerance; "
          "'would warn': its rounds ran out before two reached its best objective; CPU "
          "share: of the recorded CPU seconds, each round costing its fit's mean round")
    print(format_table(rows[0], rows[1:]))
    print(f"\ncaps growing with P (at most {most}):")
    print(format_table(["most rounds", *head], by_p))
    if args.json:
        _write_json(args.json, {"benchmark": "bench_solver", "suite": "wide-replay-rounds",
                                "replayed": list(args.replay_rounds), "table": rows,
                                "by_P": [["most rounds", *head], *by_p]})
        print(f"wrote {args.json}")
    return 0


def _case_key(c):
    return (c["gate"], c["activation"], c["K"], c["H"], c["N"], c["D"], c["n"], c["seed"],
            c["truth_seed"], c["data_seed"])


def main(argv=None):
    args = parse_args(argv)
    # shards (or processes sharing a --claim directory) run side by side: shard (slot) I
    # takes the I-th group of --threads CPUs, not the first
    slot = claim_slot(args.claim, args.json) if args.claim else parse_shard(args.shard)[0]
    limit_threads(args.threads, slot=slot)
    apply_runtime_limits(args.threads)

    from _common import environment, format_table

    from hmoe_estim import make_hmoe_regression, random_measure

    methods = [m for m in args.methods.split(",") if m]
    n_values = [int(float(v)) for v in args.n.split(",") if v]
    gates = [g for g in args.gates.split(",") if g]
    if args.pool:
        return pool_wide(args)
    if args.replay_rounds:
        return replay_rounds(args)
    if args.merge:
        return merge_wide(args)
    if args.suite == "wide":
        return run_wide(args, n_values, gates, methods)
    cases = []
    if args.suite == "tanh":
        if "trf" in methods:
            methods.remove("trf")
        # the hard case: D = 2, H = 1, N = 2, K* = 2, tanh, value gate, fitted with
        # the true K = 2 (identifiable), sigma = 0.05
        args.noise = 0.05
        plan = [("value", "tanh", 2, (1, 2, 2), 0, 10_000 + rep, n, rep)
                for n in n_values for rep in range(args.reps)]
    elif args.suite == "preset":
        if "trf" in methods:
            methods.remove("trf")
        # the quick preset's truth (presets/quick.toml: [truth] seed 0, scale 2)
        plan = [(gate, "sigmoid", 3, (1, 2, 3), 0, 10_000 + rep, n, rep)
                for n in n_values for gate in gates for rep in range(args.reps)]
    else:
        plan = truths_plan(args, n_values, gates)
    print(f"bench_solver: suite={args.suite}, {len(plan)} fits x methods {methods}, "
          f"threads={args.threads}", flush=True)
    keys = ["gate", "activation", "K"] if args.suite == "truths" else ["gate", "n"]
    meta = {"benchmark": "bench_solver", "suite": args.suite, "n": n_values,
            "methods": methods, "noise": args.noise, "cert_tol": args.cert_tol,
            "quick": args.quick, "K_true": 2, "search": args.search}
    if args.suite == "truths":
        meta.update(shapes="1x2x2" if args.quick else args.shapes,
                    seeds=args.seeds, first_seed=args.first_seed, large_n=args.large_n,
                    large_shapes=args.large_shapes, large_seeds=args.large_seeds)

    env = environment()

    def dump(table=None, tables=None):
        if args.json:
            # cases of the file not reached yet stay in it: an interrupted resume loses none
            reached = {_case_key(c) for c in cases}
            waiting = [c for k, c in done.items() if k not in reached]
            _write_json(args.json, {**meta, "complete": table is not None,
                                    "cases": cases + waiting, "table": table,
                                    "tables": tables, "environment": env})

    done = {}
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as fh:
            old = json.load(fh)
        same = all(old.get(k) == v for k, v in meta.items() if k != "total_seconds")
        if not same:
            raise SystemExit(f"--resume: {args.json} was written with other settings; "
                             "drop --resume or write to another file")
        done = {_case_key(c): c for c in old["cases"]}
        print(f"resuming: {len(done)} cases already in {args.json}", flush=True)

    t_start = time.perf_counter()
    for i, (gate, act, K, (H, N, D), truth_seed, data_seed, n, s) in enumerate(plan):
        key = (gate, act, K, H, N, D, n, s, truth_seed, data_seed)
        if key in done:
            cases.append(done[key])
            continue
        G = random_measure(H, N, 2, D, scale=2.0, random_state=truth_seed)
        X, y = make_hmoe_regression(n, measure=G, n_experts=2, n_features=D, gate=gate,
                                    activation=act, noise=args.noise, random_state=data_seed)
        res = one_case(X, y, G, (H, N, K, D), gate, act, methods, args.noise, args.cert_tol,
                       seed=s, search=args.search_knobs)
        cases.append({"gate": gate, "activation": act, "K": K, "K_true": 2, "H": H, "N": N,
                      "D": D, "n": n, "seed": s, "truth_seed": truth_seed,
                      "data_seed": data_seed, "result": res})
        line = "  ".join(f"{m}: {r['excess_sigma2_over_n']:+9.1f} {r['wall']:6.2f}s "
                         f"{r['passes']:5d}p{' FAIL' if r['failure'] else ''}"
                         for m, r in res["methods"].items())
        print(f"[{i + 1}/{len(plan)} {time.perf_counter() - t_start:5.0f}s] {gate:5s} "
              f"{act:7s} K={K} H={H} N={N} D={D} n={n:6d} seed={s}  {line}", flush=True)
        dump()
    if args.suite == "tanh":
        for m in methods:
            rs = [c["result"]["methods"][m] for c in cases]
            print(f"{m}: {sum(not r['failure'] for r in rs)} of {len(rs)} fits reach the truth's "
                  f"objective; starts: {sum(r['starts_not_above_truth'] for r in rs)} of "
                  f"{sum(r['n_finished'] for r in rs)} run to convergence")
    header, rows = summarize(cases, methods, keys)
    table = [header] + rows
    print()
    print(format_table(header, rows))
    tables = {"groups": table}
    if args.suite == "truths":
        for c in cases:
            c["shape"] = f"{c['H']}x{c['N']}x{c['D']}"
        h2, r2 = summarize(cases, methods, ["shape", "n"])
        print()
        print(format_table(h2, r2))
        tables["shapes"] = [h2] + r2
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    meta["total_seconds"] = time.perf_counter() - t_start
    if args.json:
        dump(table, tables)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
