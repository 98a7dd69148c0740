"""Run (or resume) a study: the fits still to do, in parallel, each written as it finishes.

Fits run through joblib (loky processes locally, or any joblib backend such as Dask that is
active around :func:`run_study`); results arrive unordered and each is appended at once to
``OUT/results.jsonl``. When fits run in parallel each worker sets Numba to one thread; the
kernels' sums do not depend on the thread count, so the numbers are the same whichever way
the study runs. Re-running with the same ``OUT`` skips finished fits.
"""

import os
import platform
import socket
import sys
import time

from .. import __version__
from ._fit import run_fit
from ._plan import plan_fits
from ._progress import ProgressBar
from ._results import RESULTS_FILE, ResultsWriter, record_key
from ._store import RUNS_FILE, StudyError, _locked, load_study, make_out, prepare_out

__all__ = ["run_study"]

#: ETA model of the progress bar: a fit costs like ``n + FIT_OVERHEAD_SAMPLES`` samples.
FIT_OVERHEAD_SAMPLES = 5000


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
    # local (loky) workers watch this process and exit when it dies (even by SIGKILL)
    fit = run_fit if backend_active else _run_fit_watched
    extra = () if backend_active else (os.getpid(),)
    yield from parallel(
        delayed(fit)(config, truth, name, n, rep, seed, 1, *extra)
        for name, n, rep, seed in tasks
    )


#: Seconds between two checks of a local worker that its parent is alive.
WATCH_INTERVAL = 0.5
_watching = []


def _watch_parent(parent_pid):
    """In a worker: a daemon thread that ends the process once ``parent_pid`` is gone.

    The worker's parent is the study's process; when that dies the worker is re-parented (its
    ``getppid()`` changes) — then, or when ``parent_pid`` no longer exists, it exits at once
    (``os._exit``: a fit in progress is lost, but its parent is no longer there to save it).
    """
    import threading

    if _watching:
        return
    first_ppid = os.getppid()

    def watch():
        while True:
            time.sleep(WATCH_INTERVAL)
            if first_ppid == parent_pid and os.getppid() != parent_pid:
                os._exit(1)
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except OSError:
                pass

    threading.Thread(target=watch, name="hmoe-estim-parent-watch", daemon=True).start()
    _watching.append(parent_pid)


def _run_fit_watched(config, truth, name, n, rep, seed, numba_threads, parent_pid):
    """:func:`run_fit` in a local worker that exits when the study's process dies."""
    _watch_parent(parent_pid)
    return run_fit(config, truth, name, n, rep, seed, numba_threads)


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
    t_start = time.time()
    out = make_out(out)
    with _locked(out):  # the lock first: two starts cannot both write config.json
        truth = prepare_out(out, config)
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
        # the per-iteration overhead of L-BFGS-B dominates small fits
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
