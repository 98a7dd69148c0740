"""Test set-up shared by every test module."""

import os

# scikit-learn's array-API conformance check (run by parametrize_with_checks) needs SciPy's
# array-API mode, which must be chosen before SciPy is first imported.
os.environ.setdefault("SCIPY_ARRAY_API", "1")
