"""Compile part of a cold pass on the second core: a helper process that fills Numba's cache.

On a fresh installation the first call of the prediction/Gauss–Newton pass compiles it and
every block it calls, one after another, on one core (Numba's compiler is single-threaded and
holds a process-wide lock). Numba compiles each callee on its own before its caller and, when
it does, first looks in its on-disk cache (``cache=True``). So when the pass of a gate and an
activation is about to compile and its cache entry is missing, :func:`compile_ahead` starts one
helper process (``python`` running :func:`main`) that compiles, in its own interpreter, the
blocks the pass reaches after the row combination — the softmax normalisation, the
activation, the head sum, the Jacobian block of that gate and the Gauss–Newton accumulation —,
the addition of its chunks, and the two Levenberg–Marquardt helpers a fit compiles next
(:func:`_items`). Each is written to the same cache the main process reads (the same
installation, the same ``NUMBA_CACHE_DIR``, or the same per-user directory when the package's
own directory is read-only); when the main process reaches one that is already there, it
loads it instead of compiling it. The main process never waits for the helper: whatever the
helper has not finished in time the main process compiles itself, as it would without it.
The machine code is the same either way (a cached block is linked into its callers from the
optimised LLVM module stored with it), so results are bit-identical.

Safety:

- The helper compiles the signatures the main process compiles for that pass (checked by
  ``tests/test_background_compile.py``): two processes writing the same cache entry write the
  same thing. Numba numbers the data files of a function by the count of its cached
  signatures, so two processes adding *different* signatures of one function at the same
  moment could mix them up. The activation and the Jacobian block have other signatures
  elsewhere (the objective kernel, the n × P Jacobian); the helper compiles them first and
  then writes a mark on its pipe. When the main process has compiled the pass, it stops a
  helper that has not written the mark yet (:func:`settle`); it also stops the helper before
  it compiles the pass of another gate or activation, or the n × P Jacobian. What the helper
  compiles after the mark has one signature in the package.
- The helper is started only when the cache has no entry for the pass (a warm start starts
  nothing), never with ``NUMBA_DISABLE_JIT``, never when ``sys.executable`` is not a file, and
  not at all with ``HMOE_ESTIM_BACKGROUND_COMPILE=0`` in the environment. It inherits the
  environment (``NUMBA_*`` included) and imports the same copy of the package.
- It only uses an idle core: it runs at a lower priority (``nice`` 10), and leaves at once
  when the machine had less than half a core idle over its first 0.2 s (Linux
  ``/proc/stat``; the main process, compiling, takes one core), so that on a busy machine
  it does not compete with the main process. Its output is discarded;
  if it fails, nothing changes (the main process compiles what it
  needs). It leaves when its list is done, when its parent is gone (checked between
  compilations), and is terminated at the parent's exit (``atexit``); one helper at a time.
  Cache files are written by Numba through a temporary file and a rename, so a helper stopped
  half-way leaves no partial file.

Timings (cold first fit, fresh installation, 2 cores): the documentation's performance page,
"Start-up".
"""

import atexit
import gc
import os
import subprocess
import sys
import threading

#: Environment variable that turns the helper off (``0``).
ENV_SWITCH = "HMOE_ESTIM_BACKGROUND_COMPILE"

_lock = threading.Lock()
_state = {"proc": None, "key": None, "atexit": False, "owner": None}


def _helper():
    """The running helper of this process (a forked child does not own its parent's)."""
    proc = _state["proc"]
    return proc if proc is not None and _state["owner"] == os.getpid() else None


def _items(gate, act):
    """``(dispatcher, signature)`` pairs the helper compiles, in order.

    The signatures are the ones the pass ``jacobian._pass_worker`` (gate ``gate``) and the
    Levenberg–Marquardt solver compile (``tests/test_background_compile.py`` checks it).
    The order puts first what the main process reaches soonest after the helper has started.
    """
    from numba import types

    from . import gate as gate_module
    from . import jacobian, rows
    from .activations import activation_rows
    from .objective import GATE_NONE, GATE_OUTPUT, chunk_total

    i8, f8 = types.int64, types.float64
    a1, a2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
    yield gate_module.gate_softmax, (i8, i8, a2, a2, a2, i8)
    # (the pass compiles the activation for every gate, MHA's too: the output gate's branch
    # at the end of the forward block is not pruned)
    yield activation_rows, (types.literal(int(act)), a2, i8, a2, i8, a2, i8, i8)
    yield rows.gated_sum, (a2, a2, i8, i8, a1, i8)
    yield (jacobian._jacobian_block,
           (i8, a1, i8, i8, i8, types.literal(int(gate)), types.boolean) + (a2,) * 14
           + (a1, a2))
    yield None, None  # the functions above have other signatures elsewhere; those below not
    n1 = types.Array(i8, 1, "C")
    n2 = types.Array(i8, 2, "C")
    yield jacobian._accumulate_block, (a2, a1, i8, i8, a1, n2, n1, n1, n1, n1)
    yield chunk_total, (a2,)  # the chunks of the sums added, right after the pass
    if gate in (GATE_NONE, GATE_OUTPUT):  # the sums of a basis of J's rows, expanded
        yield jacobian.basis_map, (a1, i8, i8, i8, i8)
        yield jacobian.expand_basis, (a2, a1, a1, n1, n1, a1)
    from . import lm_step

    b1 = types.Array(types.boolean, 1, "C")
    yield lm_step.free_set, (a2, a1, a1, a1, a1, b1, a1)
    yield lm_step.damped_step, (a2, a1, b1, a1, f8, n1, a2, a1, a1)


def _cached(dispatcher, sig):
    """Whether Numba's cache holds ``dispatcher`` for ``sig`` (reads the index file only).

    Numba's index keys are ``(signature, machine, code hash)``; only the signature is
    compared, so that no compiler set-up (about 0.4 s on a cold start) is needed before the
    helper starts. Anything unexpected (no cache, another Numba) counts as cached: no helper.
    """
    try:
        index = dispatcher._cache._cache_file._load_index()
        return any(key[0] == tuple(sig) for key in index)
    except Exception:
        return True


def _enabled():
    import numba

    if numba.config.DISABLE_JIT or os.environ.get(ENV_SWITCH, "1").strip() == "0":
        return False
    exe = sys.executable
    return bool(exe) and os.path.isfile(exe)


def compile_ahead(dispatcher, sig, gate, act):
    """Before ``dispatcher.compile(sig)`` (the pass of ``gate``, ``act``): start the helper if
    that pass is not in the cache. Stops a helper working for another gate or activation."""
    key = (int(gate), int(act))
    with _lock:
        proc = _helper()
        if proc is not None and proc.poll() is None and _state["key"] == key:
            return
    stop()
    if not _enabled() or _cached(dispatcher, sig):
        return
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from hmoe_estim.kernels.background import main; sys.exit(main(sys.argv[2:]))")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, package_root, str(key[0]), str(key[1]),
             str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            close_fds=True, bufsize=0,
        )
    except Exception:  # no helper: the main process compiles everything, as before
        return
    with _lock:
        _state["proc"], _state["key"], _state["owner"] = proc, key, os.getpid()
        if not _state["atexit"]:
            atexit.register(stop)
            _state["atexit"] = True


def settle():
    """After the main process compiled the pass the helper works for: stop the helper unless it
    has passed the functions that have other signatures elsewhere (its mark on the pipe), so
    that the main process never compiles another signature of one of them at the same time.
    """
    with _lock:
        proc = _helper()
    if proc is None or proc.poll() is not None:
        return
    try:
        import select

        if select.select([proc.stdout], [], [], 0)[0] and proc.stdout.read(1) == b".":
            return
    except Exception:  # no select on pipes (Windows): stop
        pass
    stop()


def stop():
    """Terminate the helper if it is running, and reap it (at most about a second)."""
    with _lock:
        proc, _state["proc"], _state["key"] = _helper(), None, None
    if proc is None:
        return
    try:
        proc.stdout.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=1.0)
    except Exception:  # pragma: no cover - already gone
        pass


def _idle_cores(seconds=0.2):
    """Idle cores of the machine over ``seconds`` (Linux ``/proc/stat``); None elsewhere."""
    import time

    def sample():
        with open("/proc/stat") as fh:
            fields = [float(v) for v in fh.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all (in ticks)

    try:
        idle0, all0 = sample()
        time.sleep(seconds)
        idle1, all1 = sample()
        ncpu = os.cpu_count() or 1
        return ncpu * (idle1 - idle0) / max(all1 - all0, 1.0)
    except Exception:
        return None


def main(argv, check_idle=True):
    """The helper: compile :func:`_items` of ``gate``, ``act`` (``argv``: gate, act, parent
    pid) into the cache; stop early when the parent process is gone, and at once when no
    core is idle (unless not ``check_idle``). Bad ``argv``: returns 1 before it changes the
    process (its priority, the collector)."""
    try:
        gate, act, parent = (int(a) for a in argv)
    except (TypeError, ValueError):
        return 1
    gc.disable()  # a short-lived process: the collector's passes only cost time
    try:
        os.nice(10)  # an idle core is all it should use: never slow the main process down
    except Exception:  # pragma: no cover - not on POSIX
        pass
    idle = _idle_cores() if check_idle else None
    if idle is not None and idle < 0.5:  # no idle core: it would only take the main's time
        return 0
    try:
        for dispatcher, sig in _items(gate, act):
            if os.getppid() != parent:
                return 0
            if dispatcher is None:  # tell the parent (settle) that the rest is safe
                os.write(sys.stdout.fileno(), b".")
                continue
            dispatcher.compile(sig)
    except Exception:
        return 1
    return 0
