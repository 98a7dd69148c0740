"""The on-disk Numba cache of the package's kernels is consistent.

Numba numbers a function's cache data files by the count of its cached signatures and writes
the index and the data file separately, without a lock. Two processes adding *different*
signatures of one function at the same moment (concurrent studies, joblib workers or test
runs on a cold cache) can pick the same file number; an index entry can then point to a data
file holding another signature's code, which a later process loads and runs under the wrong
types — one possible source of fits that differ between identical runs
(``kernels/background.py`` keeps its own helper out of that race). This test reads every
cache entry of every kernel that the runs so far (this test session, earlier ones, other
processes sharing the cache) have written and checks that each entry's data holds the
signature its key names, and that no two keys share a data file.
"""

import collections
import importlib
import os
import pickle
import pkgutil

import pytest
from numba.core.registry import CPUDispatcher

import hmoe_estim


def _dispatchers():
    seen = {}
    for info in pkgutil.walk_packages(hmoe_estim.__path__, "hmoe_estim."):
        if not info.name.startswith(("hmoe_estim.kernels", "hmoe_estim.layer")):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, CPUDispatcher) and getattr(obj, "_cache", None) is not None:
                cache_file = getattr(obj._cache, "_cache_file", None)
                if cache_file is not None:
                    seen[cache_file._index_path] = (obj, cache_file)
    return list(seen.values())


def _check_entries():
    """Assert every entry is consistent; return how many were read."""
    checked = 0
    for disp, cache_file in _dispatchers():
        overloads = cache_file._load_index()  # {} when missing, stale or of another Numba
        names = collections.Counter(overloads.values())
        assert all(c == 1 for c in names.values()), (
            f"{cache_file._index_path}: one data file named by several keys: {names}")
        for key, name in overloads.items():
            path = os.path.join(os.path.dirname(cache_file._index_path), name)
            if not os.path.exists(path):
                continue  # Numba recompiles a missing file: harmless
            with open(path, "rb") as fh:
                payload = pickle.loads(fh.read())
            sig = next(x for x in payload if type(x).__name__ == "Signature")
            assert tuple(sig.args) == tuple(key[0]), (
                f"{disp.py_func.__qualname__}: cache entry {name} holds the code of "
                f"{tuple(sig.args)} under the key {tuple(key[0])}; delete "
                f"{os.path.dirname(cache_file._index_path)} to rebuild the cache")
            checked += 1
    return checked


def test_every_cache_entry_holds_the_signature_of_its_key():
    if os.environ.get("NUMBA_DISABLE_JIT") == "1":
        pytest.skip("no compiled kernels without the JIT")
    if _check_entries() == 0:  # a cold cache (this test alone): write some entries first
        from hmoe_estim import HMoERegressor, make_hmoe_regression

        X, y = make_hmoe_regression(300, n_features=2, gate="value", random_state=0)
        HMoERegressor(n_experts=2, gate="value", random_state=0).fit(X, y)
        assert _check_entries() > 0
