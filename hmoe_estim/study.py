"""Sample-complexity studies: many least-squares fits, resumable, in parallel (SPEC §5–6).

A study (:class:`~hmoe_estim.config.StudyConfig`) is the list of fits
``(model, n, rep)`` for every model, sample size of the grid and replication. Each fit

1. gets its own seed, derived from ``(config seed, model, n, rep)`` through
   :class:`numpy.random.SeedSequence` (the model enters by a SHA-256 of ``"gate/activation"``,
   never Python's randomised ``hash``), and from it a data seed and an estimator seed;
2. draws fresh data with :func:`~hmoe_estim.datasets.make_hmoe_regression` from the study's
   true measure ``G*``;
3. fits :class:`~hmoe_estim.estimator.HMoERegressor` (``K`` channels, random multi-starts by
   default; near-truth starts only with ``fit.init = "near-truth"``, an oracle recorded as
   such; optionally a start split from a ``K-1`` fit, ``fit.split_init``);
4. records the metrics of SPEC §4 against ``G*`` on a fixed reference sample — the Voronoi
   loss with its weight / exactly-specified / over-specified parts and the extra atoms'
   weights, the expert error (heaviest atom per cell; weighted and unweighted-max variants
   too), the regression error — with fit time, convergence, objective, iterations and the
   fitted parameters.

Fits run in parallel through joblib (loky processes locally, or any joblib backend such as
Dask that is active around :func:`run_study`); results arrive unordered and each is appended
at once to ``OUT/results.jsonl`` (:mod:`hmoe_estim.results`). When fits run in parallel,
each worker sets Numba to one thread; the kernels' sums do not depend on the thread count, so
the numbers are the same whichever way the study runs.

``OUT`` holds ``config.json`` (the canonical config and its hash), ``truth.json`` (``G*``),
``results.jsonl``, ``runs.jsonl`` (one line per invocation: resources, wall time),
``rates.json`` and the PNGs. Re-running with the same ``OUT`` skips finished fits; a
different config in the same ``OUT`` is refused. A lock (``OUT/.lock``) keeps two runs from
writing to one ``OUT`` at the same time.
"""

import contextlib
import functools
import hashlib
import json
import os
import platform
import socket
import sys
import time
import traceback
import warnings

import numpy as np

from . import __version__
from .config import ConfigError, StudyConfig
from .progress import ProgressBar, format_duration
from .results import (
    RESULTS_FILE,
    ResultsError,
    ResultsWriter,
    deduplicate,
    json_safe,
    read_results,
    record_key,
    set_aside_partial,
)

__all__ = [
    "StudyError",
    "fit_seed",
    "true_measure",
    "reference_sample_for",
    "near_truth_starts",
    "plan_fits",
    "run_fit",
    "prepare_out",
    "run_study",
    "load_study",
    "write_rates",
    "fit_diagnostics",
    "sort_records",
    "format_diagnostics",
    "dask_backend",
    "CONFIG_FILE",
    "TRUTH_FILE",
    "RATES_FILE",
    "RUNS_FILE",
]

CONFIG_FILE = "config.json"
TRUTH_FILE = "truth.json"
RATES_FILE = "rates.json"
RUNS_FILE = "runs.jsonl"
LOCK_FILE = ".lock"
#: ETA model of the progress bar: a fit costs like ``n + FIT_OVERHEAD_SAMPLES`` samples.
FIT_OVERHEAD_SAMPLES = 5000


class StudyError(Exception):
    """A study that cannot run as asked (bad ``OUT``, other config, failed fits, no Dask)."""


# -- seeds ---------------------------------------------------------------------------------
def _name_key(text):
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "little")


def fit_seed(seed, model_key, n, rep):
    """The seed of fit ``(model, n, rep)``: an int in ``[0, 2**31)``.

    ``SeedSequence(entropy=seed, spawn_key=(sha256(model_key)[:4], n, rep))`` — stable across
    Python sessions, machines and the order in which fits run.

    Parameters
    ----------
    seed : int
        The study's master seed (``config.seed``).
    model_key : str
        ``"gate/activation"`` (:attr:`ModelSpec.key`).
    n, rep : int
        Sample size and replication index.
    """
    ss = np.random.SeedSequence(entropy=int(seed), spawn_key=(_name_key(model_key), int(n), int(rep)))
    return int(ss.generate_state(1, dtype=np.uint32)[0] >> 1)


def _child_seeds(seed):
    """(data seed, estimator seed, split seed) from a fit seed, each in ``[0, 2**31)``."""
    state = np.random.SeedSequence(int(seed)).generate_state(3, dtype=np.uint32) >> 1
    return tuple(int(s) for s in state)


# -- truth and reference sample -----------------------------------------------------------
def true_measure(config):
    """The study's ``G*``: the given measure, or ``random_measure`` of the truth section."""
    from .measure import MixingMeasure

    t = config.truth
    if t.measure is not None:
        return MixingMeasure.from_dict(t.measure)
    from .datasets import random_measure

    return random_measure(
        t.n_heads, t.n_tokens, t.n_experts, t.n_features, scale=t.scale, random_state=t.seed
    )


@functools.lru_cache(maxsize=4)
def _reference_sample(D, box, n_ref, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-box, box, size=(n_ref, D))
    X.setflags(write=False)
    return X


def reference_sample_for(config):
    """The fixed reference sample of the metrics: ``n_ref`` points ``~ U([-box, box]^D)``."""
    return _reference_sample(
        config.truth.n_features, config.data.box, config.metrics.n_ref, config.metrics.ref_seed
    )


def near_truth_starts(truth, n_experts, n_starts, noise, rng, *, param_bound, omega_max):
    """ORACLE starting points near ``G*`` (as in published studies; SPEC §5–6).

    Channels ``k < K*`` copy the true channels; each extra channel ``k >= K*`` copies true
    channel ``k mod K*`` and the copies share that channel's weight equally (so the start has
    the true regression function before the perturbation). With ``K < K*`` the ``K`` heaviest
    true channels are kept. Every entry of ``omega``, ``M`` (symmetrically) and ``a`` then gets
    independent ``N(0, noise²)`` perturbations, clipped to the box.

    Returns
    -------
    list of MixingMeasure
        ``n_starts`` measures of shape ``(H*, N*, K, D)``.
    """
    from .measure import MixingMeasure

    G = truth.normalized()
    H, N, Ks, D = G.shape
    K = int(n_experts)
    if K >= Ks:
        src = [k % Ks for k in range(K)]
    else:
        src = sorted(np.argsort(-G.omega.sum(axis=0))[:K].tolist())
    counts = np.bincount(src, minlength=Ks)
    omega = G.omega[:, src] / counts[src][None, :]
    a = G.a[:, :, src, :]
    starts = []
    lim = 0.99 * param_bound
    for _ in range(int(n_starts)):
        dM = rng.normal(scale=noise, size=G.M.shape)
        dM = 0.5 * (dM + np.swapaxes(dM, 2, 3))
        dM[:, -1] = 0.0
        starts.append(
            MixingMeasure(
                np.clip(omega + rng.normal(scale=noise, size=omega.shape), 0.0, 0.99 * omega_max),
                np.clip(G.M + dM, -lim, lim),
                np.clip(a + rng.normal(scale=noise, size=a.shape), -lim, lim),
            )
        )
    return starts


# -- planning ------------------------------------------------------------------------------
def plan_fits(config, done=()):
    """The fits still to run: list of ``(model_name, n, rep, seed)``.

    Ordered by decreasing ``n`` (longest first balances parallel workers), then replication,
    then model. ``done`` holds the ``(model, n, rep)`` keys already in the results file.
    """
    done = set(done)
    tasks = []
    for n in sorted(config.grid.n, reverse=True):
        for rep in range(config.grid.reps):
            for m in config.models:
                if (m.name, n, rep) in done:
                    continue
                tasks.append((m.name, n, rep, fit_seed(config.seed, m.key, n, rep)))
    return tasks


# -- one fit (runs in a worker) --------------------------------------------------------------
def _fit_one(config, truth, model, n, rep, seed):
    from sklearn.exceptions import ConvergenceWarning

    from .datasets import make_hmoe_regression
    from .estimator import HMoERegressor
    from .expert_metrics import expert_error, regression_error
    from .initialization import split_heaviest_channel
    from .regression import regression_function
    from .voronoi import voronoi_loss

    fit = config.fit
    data_seed, est_seed, split_seed = _child_seeds(seed)
    X, y = make_hmoe_regression(
        n, measure=truth, gate=model.gate, activation=model.activation,
        noise=config.data.noise, box=config.data.box, random_state=data_seed,
    )
    H, N, K, D = config.fitted_shape
    params = dict(
        n_heads=H, n_tokens=N, gate=model.gate, activation=model.activation,
        n_starts=fit.n_starts, max_iter=fit.max_iter, tol=fit.tol,
        param_bound=fit.param_bound, omega_max=fit.omega_max, n_jobs=1,
    )
    init = []
    if fit.init == "near-truth":
        init = near_truth_starts(
            truth, K, fit.n_starts, fit.near_truth_noise, np.random.default_rng(est_seed),
            param_bound=fit.param_bound, omega_max=fit.omega_max,
        )
    t0 = time.perf_counter()
    split_objective = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        if fit.split_init:
            small = HMoERegressor(n_experts=K - 1, random_state=split_seed, **params).fit(X, y)
            split_objective = small.objective_
            init = [split_heaviest_channel(small.measure_, random_state=split_seed)] + init
        est = HMoERegressor(
            n_experts=K, init=init if init else "random", random_state=est_seed, **params
        ).fit(X, y)
    fit_seconds = time.perf_counter() - t0

    t1 = time.perf_counter()
    # objective of G* itself on the same data: with K >= K* the truth lies in the fitted class,
    # so a fit whose objective is above it certainly missed the least-squares optimum
    truth_objective = float(np.mean(
        (regression_function(truth, X, gate=model.gate, activation=model.activation) - y) ** 2))
    X_ref = reference_sample_for(config)
    r = config.metrics.r or None
    G = est.measure_
    kw = dict(gate=model.gate, activation=model.activation, X_ref=X_ref)
    det = voronoi_loss(G, truth, r=r, return_details=True, **kw)
    record = {
        "model": model.name,
        "gate": model.gate,
        "activation": model.activation,
        "n": int(n),
        "rep": int(rep),
        "seed": int(seed),
        "data_seed": data_seed,
        "fit_seed": est_seed,
        "init": fit.init,
        "oracle": fit.init == "near-truth",
        "split_init": bool(fit.split_init),
        "K": int(K),
        "K_true": int(truth.n_experts),
        "voronoi_loss": float(det.loss),
        "voronoi_weight": float(det.weight_part),
        "voronoi_exact": float(det.exact_part),
        "voronoi_over": float(det.over_part),
        "voronoi_r": r,
        "extra_weights": [float(w) for w in det.extra_weights],
        "extra_weight": float(np.sum(det.extra_weights)),
        "cell_sizes": det.cells.sizes.tolist(),
        "expert_error": expert_error(G, truth, weighting="heaviest", **kw),
        "expert_error_weighted": expert_error(G, truth, weighting="weighted", **kw),
        "expert_error_max": expert_error(G, truth, weighting="max", **kw),
        "regression_error": regression_error(G, truth, **kw),
        "fit_seconds": fit_seconds,
        "converged": bool(est.converged_),
        "objective": float(est.objective_),
        "start_objectives": [float(v) for v in est.start_objectives_],
        "n_iter": int(est.n_iter_),
        "start_n_iter": [int(v) for v in est.start_n_iter_],
        "split_objective": split_objective,
        "truth_objective": truth_objective,
        "objective_gap": float(est.objective_) - truth_objective,
        "worse_than_truth": bool(est.objective_ > truth_objective and K >= truth.n_experts),
        "measure": G.to_dict(),
    }
    record["metric_seconds"] = time.perf_counter() - t1
    return record


def run_fit(config, truth, model_name, n, rep, seed, numba_threads=None):
    """Run one fit; never raises.

    Parameters
    ----------
    config : StudyConfig
    truth : MixingMeasure
    model_name : str
    n, rep, seed : int
    numba_threads : int or None
        Set Numba's thread count in this worker (1 when fits already run in parallel).

    Returns
    -------
    dict
        ``{"ok": True, "record": {...}}`` or ``{"ok": False, "key": (model, n, rep),
        "error": message, "traceback": text}``.
    """
    try:
        if numba_threads is not None:
            import numba

            numba.set_num_threads(max(1, min(int(numba_threads), numba.config.NUMBA_NUM_THREADS)))
        model = config.model(model_name)
        rec = _fit_one(config, truth, model, n, rep, seed)
        rec["host"] = socket.gethostname()
        return {"ok": True, "record": rec}
    except Exception as exc:  # reported by the parent, never lost silently
        return {
            "ok": False,
            "key": (model_name, int(n), int(rep)),
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }


# -- output directory ----------------------------------------------------------------------
def _write_json_atomic(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(json_safe(obj), fh, indent=1, sort_keys=False, allow_nan=False)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _diff_configs(old, new, prefix=""):
    diffs = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            diffs += _diff_configs(a, b, f"{prefix}{key}.")
        elif a != b:
            sa, sb = json.dumps(a), json.dumps(b)
            if len(sa) > 60:
                sa = sa[:57] + "..."
            if len(sb) > 60:
                sb = sb[:57] + "..."
            diffs.append(f"{prefix}{key}: {sa} -> {sb}")
    return diffs


@contextlib.contextmanager
def _locked(out):
    import fcntl

    path = os.path.join(out, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise StudyError(
                f"another hmoe-estim run is using {out} (lock {path} is held). Wait for it to "
                "finish or use another --out."
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def _check_out_path(out):
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise StudyError(f"--out {out!r} is a file; give a directory (it is created if missing).")
    return out


def prepare_out(out, config):
    """Create or check ``OUT`` for ``config``; return ``G*``.

    Writes ``config.json`` and ``truth.json`` for a new study. For an existing one, refuses a
    different config (by hash, listing the differing keys).

    Raises
    ------
    StudyError
        ``OUT`` is a file, holds another study, or holds results without ``config.json``.
    """
    out = _check_out_path(out)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as exc:
        raise StudyError(f"cannot create the output directory {out!r}: {exc}") from None
    cfg_path = os.path.join(out, CONFIG_FILE)
    truth_path = os.path.join(out, TRUTH_FILE)
    new = config.to_dict()
    h = config.config_hash()
    if os.path.exists(cfg_path):
        try:
            with open(cfg_path, encoding="utf-8") as fh:
                stored = json.load(fh)
            old_hash = stored["config_hash"]
            old = stored["config"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StudyError(f"{cfg_path} is unreadable ({exc}); use another --out.") from None
        if old_hash != h:
            diffs = _diff_configs(old, new)
            shown = "; ".join(diffs[:8]) + (f"; ... ({len(diffs)} differences)" if len(diffs) > 8 else "")
            raise StudyError(
                f"{out} already holds a study with a different configuration (hash {old_hash}, "
                f"this one {h}): {shown or 'same keys, other values'}. Use another --out, or "
                f"run `hmoe-estim study {cfg_path}` to resume the stored study."
            )
    elif os.path.exists(os.path.join(out, RESULTS_FILE)):
        raise StudyError(
            f"{out} has {RESULTS_FILE} but no {CONFIG_FILE}: it is not a study directory that "
            "can be resumed. Use another --out."
        )
    else:
        _write_json_atomic(cfg_path, {
            "config": new,
            "config_hash": h,
            "specification": config.specification,
            "oracle_init": config.oracle,
            "n_fits": config.n_fits(),
            "labels": {m.name: m.label for m in config.models},
            "hmoe_estim_version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        })
    truth = true_measure(config)
    if os.path.exists(truth_path):
        from .measure import MixingMeasure

        with open(truth_path, encoding="utf-8") as fh:
            stored_truth = MixingMeasure.from_dict(json.load(fh)["measure"])
        if not (stored_truth.shape == truth.shape
                and np.allclose(stored_truth.normalized().M, truth.normalized().M)
                and np.allclose(stored_truth.a, truth.a)
                and np.allclose(stored_truth.omega, truth.omega)):
            raise StudyError(
                f"{truth_path} differs from the measure this config produces now (another "
                "version of random_measure?). Use another --out to start afresh."
            )
    else:
        t = config.truth
        _write_json_atomic(truth_path, {
            "measure": truth.to_dict(),
            "shape": {"H": truth.n_heads, "N": truth.n_tokens, "K": truth.n_experts,
                      "D": truth.n_features},
            "source": "given" if t.measure is not None else
            f"random_measure(n_heads={t.n_heads}, n_tokens={t.n_tokens}, "
            f"n_experts={t.n_experts}, n_features={t.n_features}, scale={t.scale}, "
            f"random_state={t.seed})",
        })
    return truth


def load_study(out, *, repair=False, stream=None):
    """Read a study directory: ``(config, records)``.

    Parameters
    ----------
    out : str
        The study's ``OUT``.
    repair : bool, default=False
        Move a trailing crash fragment aside (only while holding the lock). Without it the
        fragment is ignored with a message.
    stream : file-like or None
        Where messages go (default stderr).

    Raises
    ------
    StudyError
        ``OUT`` missing, a file, or without ``config.json``.
    ResultsError
        A corrupt complete line in ``results.jsonl``.
    """
    stream = sys.stderr if stream is None else stream
    out = _check_out_path(out)
    cfg_path = os.path.join(out, CONFIG_FILE)
    if not os.path.isdir(out):
        raise StudyError(f"{out!r} does not exist; run a study into it first.")
    if not os.path.exists(cfg_path):
        raise StudyError(f"{out} has no {CONFIG_FILE}: not a study directory.")
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            config = StudyConfig.from_dict(json.load(fh))
    except (OSError, ValueError) as exc:
        raise StudyError(f"{cfg_path} is unreadable: {exc}") from None
    path = os.path.join(out, RESULTS_FILE)
    records, partial = read_results(path)
    if partial is not None:
        if repair:
            aside = set_aside_partial(path, partial)
            print(
                f"hmoe-estim: {path} ended with an unfinished line ({len(partial)} bytes, left "
                f"by an interrupted run); moved it to {aside}. Its fit will be run again.",
                file=stream,
            )
        else:
            print(
                f"hmoe-estim: ignoring an unfinished last line of {path} ({len(partial)} bytes, "
                "left by an interrupted run); the next `study`/`reproduce` run sets it aside.",
                file=stream,
            )
    records, dups = deduplicate(records)
    if dups:
        print(f"hmoe-estim: {path} holds {dups} duplicate fit(s); using the first of each.",
              file=stream)
    names = {m.name for m in config.models}
    grid = set(config.grid.n)
    stray = [r for r in records if r["model"] not in names or r["n"] not in grid
             or not 0 <= r["rep"] < config.grid.reps]
    if stray:
        raise ResultsError(
            f"{path} holds {len(stray)} record(s) that are not fits of the stored config "
            f"(first: model={stray[0]['model']!r}, n={stray[0]['n']}, rep={stray[0]['rep']}). "
            "Was the file copied from another study? Use another --out."
        )
    return config, records


# -- parallel execution --------------------------------------------------------------------
def _n_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def _results(config, truth, tasks, n_jobs, backend_active):
    from joblib import Parallel, delayed, effective_n_jobs

    if not backend_active and effective_n_jobs(n_jobs) == 1:
        # sequential: Numba's own threads parallelise each fit
        for name, n, rep, seed in tasks:
            yield run_fit(config, truth, name, n, rep, seed, numba_threads=None)
        return
    parallel = Parallel(n_jobs=n_jobs, return_as="generator_unordered", batch_size=1,
                        pre_dispatch="all" if backend_active else "2*n_jobs")
    yield from parallel(
        delayed(run_fit)(config, truth, name, n, rep, seed, 1) for name, n, rep, seed in tasks
    )


def run_study(config, out, *, n_jobs=-1, backend_name=None, progress=True, stream=None,
              max_fits=None):
    """Run (or resume) a study into ``out``.

    Parameters
    ----------
    config : StudyConfig
    out : str or path
        Output directory (created if missing).
    n_jobs : int, default=-1
        Parallel fits (joblib convention: -1 = all cores). With ``1`` fits run one after the
        other and Numba uses all cores inside each fit.
    backend_name : str or None
        Name of an active joblib backend context entered by the caller (e.g. ``"dask"`` inside
        :func:`dask_backend`); recorded in ``runs.jsonl``. Fits are then dispatched to it.
    progress : bool, default=True
        Show the progress bar on ``stream``.
    stream : file-like or None
        Messages and progress (default stderr).
    max_fits : int or None
        Run at most this many of the remaining fits (for measuring a slice).

    Returns
    -------
    dict
        ``n_total``, ``n_skipped`` (already done), ``n_run``, ``n_failed``, ``failures`` (list
        of ``(key, error)``), ``wall_seconds``, ``out``.

    Raises
    ------
    StudyError
        ``OUT`` unusable or holding another study (see :func:`prepare_out`), or some fits
        failed (after all others were written).
    ResultsError
        ``results.jsonl`` has a corrupt complete line.
    """
    stream = sys.stderr if stream is None else stream
    out = _check_out_path(out)
    t_start = time.time()
    truth = prepare_out(out, config)
    with _locked(out):
        _, records = load_study(out, repair=True, stream=stream)
        done = {record_key(r) for r in records}
        tasks = plan_fits(config, done)
        n_total = config.n_fits()
        n_skipped = n_total - len(tasks)
        if max_fits is not None:
            tasks = tasks[: int(max_fits)]
        if n_skipped:
            print(f"hmoe-estim: {n_skipped} of {n_total} fits already in {out}; running the "
                  f"other {len(tasks)}.", file=stream)
        # a fit costs about (n + FIT_OVERHEAD_SAMPLES) sample-evaluations' worth of time:
        # per-iteration overhead of L-BFGS-B dominates small fits (measured on the presets)
        weights = {(t[0], t[1], t[2]): t[1] + FIT_OVERHEAD_SAMPLES for t in tasks}
        bar = ProgressBar(len(tasks), sum(weights.values()), stream=stream,
                          enabled=progress and bool(tasks))
        failures = []
        n_run = 0
        path = os.path.join(out, RESULTS_FILE)
        jobs = n_jobs
        with ResultsWriter(path) as writer, bar:
            for res in _results(config, truth, tasks, jobs, backend_name is not None):
                if res["ok"]:
                    rec = res["record"]
                    writer.append(rec)
                    n_run += 1
                    key = record_key(rec)
                else:
                    key = tuple(res["key"])
                    failures.append((key, res["error"], res["traceback"]))
                bar.update(weight=weights.get(key, key[1] + FIT_OVERHEAD_SAMPLES))
        wall = time.time() - t_start
        from joblib import effective_n_jobs

        run_info = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_start)),
            "wall_seconds": wall,
            "n_jobs": n_jobs if backend_name else effective_n_jobs(n_jobs),
            "backend": backend_name or ("sequential" if effective_n_jobs(n_jobs) == 1 else "loky"),
            "fits_run": n_run,
            "fits_failed": len(failures),
            "fits_skipped": n_skipped,
            "cpus": _n_cpus(),
            "load_average_end": list(os.getloadavg()),
            "host": socket.gethostname(),
            "python": platform.python_version(),
            "hmoe_estim_version": __version__,
        }
        with ResultsWriter(os.path.join(out, RUNS_FILE), fsync=False) as w:
            w.append(run_info)
    summary = {
        "n_total": n_total, "n_skipped": n_skipped, "n_run": n_run, "n_failed": len(failures),
        "failures": [(k, e) for k, e, _ in failures], "wall_seconds": wall, "out": out,
    }
    if failures:
        key, err, tb = failures[0]
        raise StudyError(
            f"{len(failures)} fit(s) failed (the {n_run} others are saved in {path}); first: "
            f"model={key[0]} n={key[1]} rep={key[2]}: {err}. Rerun the same command to retry "
            f"them.\n{tb}"
        )
    return summary


def fit_diagnostics(records):
    """Per model: fits, converged share, share of fits worse than ``G*`` on their own data,
    median fit seconds and mean weight of extra atoms.

    ``worse_than_truth`` (objective above the true measure's objective on the same data, with
    ``K >= K*``) certainly marks a fit that missed the least-squares optimum — a local optimum
    of the multi-start search, not a statistical effect.
    """
    out = {}
    for rec in records:
        out.setdefault(rec["model"], []).append(rec)
    table = {}
    for model, recs in out.items():
        worse = [r.get("worse_than_truth") for r in recs if r.get("worse_than_truth") is not None]
        table[model] = {
            "fits": len(recs),
            "converged": float(np.mean([bool(r["converged"]) for r in recs])),
            "worse_than_truth": float(np.mean(worse)) if worse else None,
            "median_fit_seconds": float(np.median([r["fit_seconds"] for r in recs])),
            "total_fit_seconds": float(np.sum([r["fit_seconds"] for r in recs])),
            "mean_extra_weight": float(np.mean([r.get("extra_weight", 0.0) for r in recs])),
        }
    return table


def format_diagnostics(table, labels=None):
    """Plain-text table of :func:`fit_diagnostics`."""
    head = (f"{'model':<12} {'fits':>5} {'converged':>10} {'worse than G*':>14} "
            f"{'median fit s':>13} {'total fit s':>12} {'extra weight':>13}")
    lines = [head, "-" * len(head)]
    for model, d in table.items():
        name = labels.get(model, model) if labels else model
        worse = "-" if d["worse_than_truth"] is None else f"{100 * d['worse_than_truth']:.0f}%"
        lines.append(
            f"{name:<12} {d['fits']:>5} {100 * d['converged']:>9.0f}% {worse:>14} "
            f"{d['median_fit_seconds']:>13.2f} {d['total_fit_seconds']:>12.1f} "
            f"{d['mean_extra_weight']:>13.3f}"
        )
    return "\n".join(lines)


def sort_records(config, records):
    """Records in the canonical order (config's model order, then ``n``, then ``rep``).

    Results arrive in completion order, which depends on the machine; sorting makes the rates
    (including their bootstrap intervals) independent of how the study was run.
    """
    order = {m.name: j for j, m in enumerate(config.models)}
    return sorted(records, key=lambda r: (order.get(r["model"], len(order)), r["n"], r["rep"]))


def write_rates(out, *, records=None, config=None, eps=None, n_boot=2000, metrics=None,
                stream=None):
    """Fit the rates of every model and metric of ``out`` and write ``OUT/rates.json``.

    Returns
    -------
    dict
        ``{model: {metric: {...}}}`` as written (see :func:`hmoe_estim.rates.fit_rates`), with
        ``{model: {"identifiability": verdict}}`` and a ``"reading"`` of each parameter
        metric's slope (:func:`hmoe_estim.identifiability.annotate_rates`).
    """
    from .rates import RATE_METRICS, rates_from_records

    if records is None or config is None:
        config, records = load_study(out, stream=stream)
    records = sort_records(config, records)
    if not records:
        raise StudyError(f"{out} has no finished fits yet; run the study first.")
    rates = rates_from_records(records, metrics=metrics or RATE_METRICS, eps=eps, n_boot=n_boot,
                               random_state=config.seed)
    # identifiability verdict of each model next to its slopes (hmoe_estim.identifiability)
    from .identifiability import annotate_rates

    annotate_rates(rates, config)
    _write_json_atomic(os.path.join(out, RATES_FILE), rates)
    return rates


# -- Dask ----------------------------------------------------------------------------------
@contextlib.contextmanager
def dask_backend(scheduler=None, n_workers=None, *, timeout=10, processes=True):
    """Run the joblib calls inside on Dask: a scheduler address or a local cluster.

    Parameters
    ----------
    scheduler : str or None
        Address of a running scheduler (``tcp://host:8786``). Its workers must have
        ``hmoe_estim`` installed (same version).
    n_workers : int or None
        Start a local cluster of this many single-threaded workers instead.
    timeout : float, default=10
        Seconds to wait for the scheduler.
    processes : bool, default=True
        Local cluster workers as processes (True) or threads.

    Yields
    ------
    distributed.Client

    Raises
    ------
    StudyError
        ``dask.distributed`` is not installed, or the scheduler cannot be reached.
    """
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise StudyError(
            "the Dask options need dask.distributed: pip install 'hmoe-estim[dask]' "
            "(or pip install 'dask[distributed]')."
        ) from None
    import logging

    from joblib import parallel_backend

    for name in ("distributed", "distributed.scheduler", "distributed.core",
                 "distributed.comm", "distributed.worker", "distributed.nanny"):
        logging.getLogger(name).setLevel(logging.ERROR)
    cluster = None
    try:
        if scheduler is not None:
            try:
                client = Client(scheduler, timeout=timeout)
            except Exception as exc:  # refused, timed out, or not a Dask scheduler at all
                raise StudyError(
                    f"cannot reach the Dask scheduler at {scheduler!r} within {timeout:g} s "
                    f"({type(exc).__name__}: {exc}). Check the address (tcp://host:8786) and "
                    "that `dask scheduler` is running."
                ) from None
        else:
            if n_workers is None or int(n_workers) < 1:
                raise StudyError(f"--dask-workers must be >= 1; got {n_workers}.")
            cluster = LocalCluster(n_workers=int(n_workers), threads_per_worker=1,
                                   processes=processes, dashboard_address=None)
            client = Client(cluster)
        try:
            with parallel_backend("dask"):
                yield client
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
