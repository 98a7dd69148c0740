"""The helper process that compiles part of a cold pass (``hmoe_estim/kernels/background.py``).

Its list must name the signatures the main process compiles (else it only burns the second
core); it must start nothing on a warm cache or when switched off, leave no process behind,
and fill a cold cache with the functions it lists — and a pass compiled from them gives the
bits of a warm process.
"""

import os
import subprocess
import sys

import numpy as np
from numba import types

from hmoe_estim.kernels import background
from hmoe_estim.kernels.jacobian import _pass_worker, forward_values

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_helper_on_a_warm_cache_or_when_switched_off(monkeypatch):
    rng = np.random.default_rng(1)
    XT = np.ascontiguousarray(rng.normal(size=(2, 30)))
    forward_values(rng.normal(size=12), XT, 1, 2, 1, 2, 1, 0)  # compiled (or loaded): cached
    i8, f8 = types.int64, types.float64
    a1, a2 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C")
    sig = (i8, i8, a1, a2, a1, f8, a1, i8, i8, i8, types.literal(1), types.literal(0), a2,
           a1, types.boolean)
    assert sig in _pass_worker.signatures
    background.compile_ahead(_pass_worker, sig, 1, 0)
    assert background._state["proc"] is None  # in the cache: nothing started
    monkeypatch.setenv(background.ENV_SWITCH, "0")
    background.compile_ahead(_pass_worker, (types.int8,), 1, 0)  # not cached, but off
    assert background._state["proc"] is None


def test_helper_starts_on_a_missing_entry_and_stops_cleanly():
    # a signature the cache never holds stands for a cold pass: the helper starts (its own
    # list is cached by now, so it only loads), and stop() reaps it
    background.compile_ahead(_pass_worker, (types.int8,), 1, 0)
    proc = background._state["proc"]
    assert proc is not None
    background.compile_ahead(_pass_worker, (types.int8,), 1, 0)  # same key: the same helper
    assert background._state["proc"] is proc
    background.stop()
    assert proc.returncode is not None
    assert background._state["proc"] is None
    background.stop()  # nothing running: a no-op
    background.settle()


def _stand_in_helper(code):
    """A process standing in for the helper (``code`` decides whether it writes the mark)."""
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, bufsize=0)
    with background._lock:
        background._state.update(proc=proc, key=(9, 9), owner=os.getpid())
    return proc


def test_settle_keeps_a_helper_past_its_mark_and_stops_one_before_it():
    import select

    # before its mark (it never writes one): settle stops and reaps it
    proc = _stand_in_helper("import time; time.sleep(60)")
    background.settle()
    assert background._state["proc"] is None
    assert proc.returncode is not None
    # past its mark: settle keeps it running
    proc = _stand_in_helper("import os, time; os.write(1, b'.'); time.sleep(60)")
    assert select.select([proc.stdout], [], [], 60)[0]  # the mark is on the pipe
    background.settle()
    assert background._state["proc"] is proc and proc.poll() is None
    background.stop()
    assert proc.returncode is not None and background._state["proc"] is None
    # a real helper that has finished its list (warm cache): settle leaves it, stop reaps it
    background.compile_ahead(_pass_worker, (types.int8,), 1, 0)
    proc = background._state["proc"]
    assert proc.wait(timeout=300) == 0
    background.settle()
    assert background._state["proc"] is proc
    background.stop()
    assert background._state["proc"] is None


_FIRST_FIT_BITS = """
import numpy as np
from hmoe_estim.kernels.jacobian import forward_values, gauss_newton_sums
from hmoe_estim.solvers import levenberg_marquardt
rng = np.random.default_rng(0)
H, N, K, D = 1, 2, 2, 2
P = H * K + H * (N - 1) * D * (D + 1) // 2 + H * N * K * D
theta = rng.normal(size=P)
XT = np.ascontiguousarray(rng.normal(size=(D, 40)))
y = forward_values(theta, XT, H, N, K, D, 1, 0)
sums = gauss_newton_sums(theta, XT, y + 0.01 * rng.normal(size=40), H, N, K, D, 1, 0)
res = levenberg_marquardt(theta + 0.1, XT, y, (H, N, K, D), "value", "sigmoid",
                          np.full(P, -10.0), np.full(P, 10.0), max_iter=2)
bits = b"".join(np.asarray(v).tobytes() for v in sums) + res.theta.tobytes()
"""

_FIRST_FIT = """
from numba.core import event
rec = event.RecordingListener()
event.register("numba:compile", rec)
""" + _FIRST_FIT_BITS + """
print(bits.hex())
print(sorted({e.data["dispatcher"].py_func.__name__ for _, e in rec.buffer}))
"""


def test_helper_fills_a_cold_cache_with_what_the_first_fit_loads(tmp_path):
    # the helper on a cold cache, then a first pass and Levenberg–Marquardt fit (value gate)
    # without helper: every function of the helper's list is loaded, not compiled — so the
    # list names the signatures the pass and the solver compile
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    env[background.ENV_SWITCH] = "0"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from hmoe_estim.kernels.background import main; "
            "import os; sys.exit(main([sys.argv[2], '0', str(os.getppid())], check_idle=False))")
    res = subprocess.run([sys.executable, "-c", code, ROOT, "1"], env=env, timeout=600)
    assert res.returncode == 0
    names = {f for _, _, files in os.walk(tmp_path) for f in files if f.endswith(".nbi")}
    listed = [d.py_func.__name__ for d, _ in background._items(1, 0) if d is not None]
    assert listed == ["gate_softmax", "activation_rows", "gated_sum", "_jacobian_block",
                      "_accumulate_block", "chunk_total", "free_set", "damped_step"]
    for fn in listed:
        assert any(fn + "-" in f for f in names), (fn, names)
    linear = [d.py_func.__name__ for d, _ in background._items(0, 0) if d is not None]
    assert linear == listed[:6] + ["basis_map", "expand_basis"] + listed[6:]  # their expansion
    res = subprocess.run([sys.executable, "-c", _FIRST_FIT], env=env, timeout=600, cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    compiled = eval(res.stdout.strip().splitlines()[-1])
    assert "_pass_worker" in compiled and "_forward_block" in compiled
    assert not set(listed) & set(compiled), compiled
    # compiled there, partly from the helper's cache entries: the bits of a warm process
    warm = {}
    exec(_FIRST_FIT_BITS, warm)
    assert res.stdout.strip().splitlines()[-2] == warm["bits"].hex()


def test_helper_fails_quietly():
    import gc

    before = os.nice(0)
    assert background.main(["not", "a", "number"], check_idle=False) == 1
    assert background.main(["1", "2"], check_idle=False) == 1
    # bad arguments leave the calling process as it was: priority and the collector
    assert os.nice(0) == before and gc.isenabled()


def test_idle_cores_is_a_number_of_cores_or_none():
    idle = background._idle_cores(0.01)
    assert idle is None or 0.0 <= idle <= (os.cpu_count() or 1) + 1e-9


def test_a_forked_child_does_not_own_the_helper(monkeypatch):
    monkeypatch.setitem(background._state, "proc", object())
    monkeypatch.setitem(background._state, "owner", os.getpid() + 1)
    assert background._helper() is None
    background.settle()  # nothing of its own to settle or stop
