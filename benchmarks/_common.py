"""Timing, machine-load and environment helpers shared by the benchmark scripts.

Import after :func:`_threads.limit_threads`. The machine may be shared with other processes
that this one cannot see (other containers on the same cores), so the helpers

- time implementations in *interleaved blocks* (a block of calls of each per round), so that
  a burst of outside load hits every implementation alike, and report the median and minimum;
- measure the CPU time used by everything *but* this process from ``/proc/stat``
  (``external_load``, in cores) and can wait for a quiet machine before a measurement.
"""

import os
import platform
import sys
import time

import numpy as np

__all__ = [
    "LoadMeter", "wait_for_quiet", "time_interleaved", "environment", "geomean",
    "format_table",
]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _system_busy():
    """Total busy CPU seconds of the machine (all cores), or None off Linux."""
    try:
        with open("/proc/stat") as fh:
            fields = fh.readline().split()[1:]
    except OSError:
        return None
    vals = [int(v) for v in fields]
    # user nice system idle iowait irq softirq steal ...
    busy = vals[0] + vals[1] + vals[2] + vals[5] + vals[6] + (vals[7] if len(vals) > 7 else 0)
    return busy / _TICK


def _minor_faults():
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _self_busy():
    t = os.times()
    return t.user + t.system


class LoadMeter:
    """CPU cores kept busy by *other* processes between :meth:`start` and :meth:`stop`."""

    def start(self):
        self._t0 = time.perf_counter()
        self._sys0 = _system_busy()
        self._self0 = _self_busy()
        return self

    def stop(self):
        """Average number of cores used by other processes (None if unknown)."""
        wall = time.perf_counter() - self._t0
        sys1 = _system_busy()
        if self._sys0 is None or sys1 is None or wall <= 0:
            return None
        other = (sys1 - self._sys0) - (_self_busy() - self._self0)
        return max(0.0, other / wall)


def wait_for_quiet(threshold=0.25, window=1.0, max_wait=60.0, verbose=True):
    """Wait until other processes use less than ``threshold`` cores over ``window`` seconds.

    Gives up after ``max_wait`` seconds; returns the last measured outside load.
    """
    t_end = time.perf_counter() + max_wait
    load = None
    warned = False
    while True:
        meter = LoadMeter().start()
        time.sleep(window)
        load = meter.stop()
        if load is None or load < threshold or time.perf_counter() > t_end:
            return load
        if verbose and not warned:
            print(f"  (waiting for a quiet machine: other processes use {load:.2f} cores)",
                  file=sys.stderr)
            warned = True


def time_interleaved(fns, *, warmup=2, min_repeats=5, max_repeats=200, min_time=0.5,
                     block_time=0.2, settle=0.15):
    """Time each zero-argument function in ``fns`` (dict name -> fn), in interleaved blocks.

    A round runs every function for one block (in rotating order); a block is one untimed
    call, which wakes the library's thread pool after another library ran, then timed calls
    until ``block_time`` seconds have passed. Rounds continue until every function has
    ``min_repeats`` timed calls and the slowest has used ``min_time`` seconds, or all have
    ``max_repeats`` calls (a function stops being called once it has them). Calling each
    library back to back, rather than alternating single calls, keeps one library's idle
    spinning threads from stealing the cores of the next (OpenMP, Eigen and OpenBLAS pools
    spin for a while before they sleep). Before each block
    the process sleeps ``settle`` seconds: OpenBLAS's idle workers spin for ~0.1-0.15 s after
    a call (measured here: the Numba kernel ran at half speed for 140 ms after one NumPy
    ``matmul``), so without the pause the library timed after NumPy pays for NumPy's pool.

    Returns ``{name: {"median", "min", "q1", "q3", "repeats", "minor_faults_per_call"}}``
    (times in seconds; page faults of the timed calls, from ``getrusage``), plus
    ``"_external_load"``: cores used by other processes meanwhile.
    """
    names = list(fns)
    for _ in range(warmup):
        for nm in names:
            fns[nm]()
    times = {nm: [] for nm in names}
    faults = {nm: 0 for nm in names}
    meter = LoadMeter().start()
    r = 0
    while True:
        order = names[r % len(names):] + names[: r % len(names)]
        for nm in order:
            if len(times[nm]) >= max_repeats:
                continue
            if settle:
                time.sleep(settle)  # let the previous library's pool go to sleep
            fns[nm]()  # untimed: wake this library's pool
            f0 = _minor_faults()
            t_block = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                fns[nm]()
                t1 = time.perf_counter()
                times[nm].append(t1 - t0)
                if t1 - t_block >= block_time or len(times[nm]) >= max_repeats:
                    break
            faults[nm] += _minor_faults() - f0
        r += 1
        counts = [len(v) for v in times.values()]
        if min(counts) >= max_repeats:
            break
        if min(counts) >= min_repeats and max(sum(v) for v in times.values()) >= min_time:
            break
    out = {}
    for nm, ts in times.items():
        ts = np.asarray(ts)
        out[nm] = {
            "median": float(np.median(ts)),
            "min": float(ts.min()),
            "q1": float(np.percentile(ts, 25)),
            "q3": float(np.percentile(ts, 75)),
            "repeats": int(ts.size),
            "minor_faults_per_call": faults[nm] / ts.size,
        }
    out["_external_load"] = meter.stop()
    return out


def geomean(values):
    values = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if values.size == 0:
        return None
    return float(np.exp(np.mean(np.log(values))))


def _cpu_model():
    """The CPU's model name, with its family and model numbers where /proc/cpuinfo has them
    (a virtual machine may say only "AMD EPYC": family 23 is Zen 1/2, 25 Zen 3/4)."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in fields:
                    fields[key] = value.strip()
                if not line.strip() and fields:
                    break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def environment():
    """Versions, CPU and thread set-up of this process (for the JSON output)."""
    import numba
    from _threads import thread_report

    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "numba": numba.__version__,
    }
    try:
        import scipy

        info["scipy"] = scipy.__version__
    except ImportError:
        pass
    for mod in ("torch", "jax"):
        if mod in sys.modules:
            info[mod] = sys.modules[mod].__version__
    try:
        import hmoe_estim

        info["hmoe_estim"] = getattr(hmoe_estim, "__version__", "?")
    except ImportError:
        pass
    info["threads"] = thread_report()
    return info


def format_table(header, rows):
    """Plain-text table with right-aligned columns."""
    cells = [list(map(str, header))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for j, row in enumerate(cells):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
