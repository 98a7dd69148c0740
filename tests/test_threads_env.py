"""``import hmoe_estim`` sets the OpenMP wait policy only when the user did not choose one."""

import json
import os
import subprocess
import sys

_SCRIPT = (
    "import json, os, hmoe_estim; "
    "print(json.dumps({k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}))"
)


def _env_after_import(**overrides):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(overrides)
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_defaults_short_spin_then_sleep():
    assert _env_after_import() == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}


def test_user_wait_policy_wins():
    assert _env_after_import(OMP_WAIT_POLICY="ACTIVE") == {
        "OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": None}


def test_user_spincount_wins():
    assert _env_after_import(GOMP_SPINCOUNT="0") == {
        "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "0"}
