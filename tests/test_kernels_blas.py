"""``kernels.blas.syrk_upper`` against a plain-NumPy ``JᵀJ``."""

import numpy as np
import pytest

from hmoe_estim.kernels.blas import SyrkArgs, syrk_upper


@pytest.mark.parametrize("rows, P, m", [(1, 1, 1), (5, 3, 5), (300, 17, 256), (64, 96, 40)])
def test_syrk_adds_the_upper_triangle_of_jtj(rows, P, m):
    rng = np.random.default_rng(P)
    J = rng.normal(size=(rows, P))
    A0 = rng.normal(size=(P, P))
    A = A0.copy()
    syrk_upper(A, J, m, *SyrkArgs())
    expected = A0 + J[:m].T @ J[:m]
    iu = np.triu_indices(P)
    np.testing.assert_allclose(A[iu], expected[iu], rtol=1e-13, atol=1e-12)
    il = np.tril_indices(P, -1)
    np.testing.assert_array_equal(A[il], A0[il])  # the lower triangle is left as it was


def test_syrk_of_no_rows_changes_nothing():
    A = np.ones((3, 3))
    syrk_upper(A, np.ones((4, 3)), 0, *SyrkArgs())
    np.testing.assert_array_equal(A, np.ones((3, 3)))
