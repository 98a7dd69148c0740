"""The kernels run as plain Python with ``NUMBA_DISABLE_JIT=1`` (stumpy-style).

Interpreted, every bounds error and shape slip that compiled code would hide surfaces as a
Python exception; the interpreted and compiled results must agree.
"""

import json
import os
import subprocess
import sys

import numpy as np

from hmoe_estim.kernels.objective import objective_and_gradient, predict

_SCRIPT = r"""
import json, sys
import numpy as np
from hmoe_estim.kernels.objective import objective_and_gradient, predict
rng = np.random.default_rng(0)
out = {}
for gate in range(4):
    H, N, K, D = 2, 3, 2, 2
    P = H * K + H * (N - 1) * 3 + H * N * K * D
    theta = rng.normal(size=P)
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(D, 150)))
    y = rng.normal(size=150)
    v, g = objective_and_gradient(theta, XT, y, H, N, K, D, gate, gate % 4)
    f = predict(theta, XT, H, N, K, D, gate, gate % 4)
    out[gate] = [theta.tolist(), XT.tolist(), y.tolist(), v, g.tolist(), f.tolist()]
json.dump(out, sys.stdout)
"""


def test_interpreted_kernels_match_compiled():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True
    )
    for gate, (theta, XT, y, v, g, f) in json.loads(proc.stdout).items():
        theta, XT, y = np.array(theta), np.array(XT), np.array(y)
        gate = int(gate)
        v2, g2 = objective_and_gradient(theta, XT, y, 2, 3, 2, 2, gate, gate % 4)
        f2 = predict(theta, XT, 2, 3, 2, 2, gate, gate % 4)
        np.testing.assert_allclose(v2, v, rtol=1e-12)
        np.testing.assert_allclose(g2, g, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(f2, f, rtol=1e-12, atol=1e-12)
