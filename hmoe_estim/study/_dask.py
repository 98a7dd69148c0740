"""Run a study's fits on a Dask cluster through joblib's ``dask`` backend."""

import contextlib

from ._store import StudyError

__all__ = ["dask_backend"]


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
