"""Limit every numeric library to the same number of threads.

Must run BEFORE numpy, numba, torch or jax are imported: the thread pools of OpenBLAS, MKL,
OpenMP and XLA read their environment variables when they start. Imports nothing heavy.

Three mechanisms are combined, so that no library can use more cores than the others:

1. the process's CPU affinity is restricted to ``threads`` of the CPUs it may run on, the
   first ones unless a ``slot`` says which (``os.sched_setaffinity``; XLA and Eigen size
   their pools from it);
2. ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``NUMBA_NUM_THREADS``
   are set, and ``XLA_FLAGS`` gets ``--xla_cpu_multi_thread_eigen=false`` when ``threads == 1``
   (XLA has no flag for a pool of another size: it follows the affinity of step 1);
3. after import, :func:`apply_runtime_limits` calls ``numba.set_num_threads`` and
   ``torch.set_num_threads`` (done by the callers once the libraries are loaded).
"""

import os
import sys

__all__ = ["limit_threads", "apply_runtime_limits", "thread_report", "keep_freed_memory"]

_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def limit_threads(threads, omp_wait_policy="PASSIVE", gomp_spincount="10000", slot=0):
    """Set the thread environment for ``threads`` threads; return the CPUs kept.

    ``slot`` chooses which ``threads`` CPUs of those allowed: the ``slot``-th group of
    ``threads`` (cyclically), so that processes run side by side with slots 0, 1, ... get
    CPUs of their own instead of all sharing the first.

    ``omp_wait_policy`` sets ``OMP_WAIT_POLICY`` unless the caller's environment has it
    (``None`` leaves it alone); with it, ``gomp_spincount`` sets GNU libgomp's
    ``GOMP_SPINCOUNT`` (idle workers spin that many rounds, then sleep). ``PASSIVE`` and
    ``10000`` are what ``import hmoe_estim`` sets. They must be
    chosen here, for every library at once: PyTorch ships its OpenMP runtime as
    ``libgomp.so.1``, and Numba's OpenMP layer then binds to that already-loaded copy, which
    read the variable when torch was imported.

    Raises
    ------
    ValueError
        If ``threads < 1`` or a heavy library was already imported (too late to limit it).
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1; got {threads}.")
    late = [m for m in ("numpy", "numba", "torch", "jax") if m in sys.modules]
    if late:
        raise ValueError(
            f"limit_threads() must run before importing {late}; call it first in the script."
        )
    cpus = None
    if hasattr(os, "sched_getaffinity"):
        allowed = sorted(os.sched_getaffinity(0))
        first = (int(slot) * threads) % len(allowed)
        cpus = (allowed[first:] + allowed[:first])[:threads]
        os.sched_setaffinity(0, cpus)
    for var in _ENV_VARS:
        os.environ[var] = str(threads)
    if omp_wait_policy is not None and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = omp_wait_policy
        if gomp_spincount is not None and omp_wait_policy.upper() == "PASSIVE":
            os.environ.setdefault("GOMP_SPINCOUNT", str(gomp_spincount))
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1 and "xla_cpu_multi_thread_eigen" not in flags:
        flags += " --xla_cpu_multi_thread_eigen=false"
    os.environ["XLA_FLAGS"] = flags.strip()
    return cpus


_MALLOC_VARS = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "8589934592"}


def keep_freed_memory(argv):
    """Re-execute this script with glibc told to keep freed memory (unless already done).

    By default glibc returns large freed blocks (``mmap``-ed, > 32 MiB at most) to the kernel,
    so code that allocates big temporaries on every call (the NumPy, PyTorch peers) pays page
    faults on every call — on a virtual machine that reports freed pages to its host this costs
    up to 10x the arithmetic. ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` keep the
    memory in the heap, which favours those peers; the Numba kernel, whose temporaries are a
    few kilobytes per thread, is unaffected. glibc reads them at start-up, hence the
    re-execution. Returns only if nothing had to be done.
    """
    if all(v in os.environ for v in _MALLOC_VARS):
        return
    env = dict(os.environ)
    for var, value in _MALLOC_VARS.items():
        env.setdefault(var, value)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + list(argv), env)


def apply_runtime_limits(threads):
    """Call the run-time thread setters of the libraries that are importable."""
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (interop pool started)
        pass


def thread_report():
    """A dict describing the thread set-up and the BLAS kernels numpy runs."""
    info = {
        "affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "env": {v: os.environ.get(v) for v in _ENV_VARS + ("XLA_FLAGS",)},
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        "GOMP_SPINCOUNT": os.environ.get("GOMP_SPINCOUNT"),
        "malloc": {v: os.environ.get(v) for v in _MALLOC_VARS},
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
    }
    try:
        from threadpoolctl import threadpool_info

        info["threadpools"] = [
            {k: p.get(k) for k in ("internal_api", "num_threads", "architecture", "version",
                                   "threading_layer")}
            for p in threadpool_info()
        ]
    except ImportError:
        info["threadpools"] = "threadpoolctl not installed"
    try:
        import numba

        info["numba_threads"] = numba.get_num_threads()
        info["numba_threading_layer"] = numba.config.THREADING_LAYER
    except Exception:  # pragma: no cover - informative only
        pass
    if "torch" in sys.modules:
        info["torch_threads"] = sys.modules["torch"].get_num_threads()
    return info
