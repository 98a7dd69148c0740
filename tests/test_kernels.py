"""Kernels against plain-NumPy evaluations of the paper's eq. (2), (9), (12) and finite
differences."""

import numpy as np
import pytest

from hmoe_estim import MixingMeasure, regression_function
from hmoe_estim._names import ACTIVATION_CODES, ACTIVATIONS, GATE_CODES, GATES
from hmoe_estim.kernels.activations import activation_values
from hmoe_estim.kernels.objective import BLOCK, objective_and_gradient, predict
from hmoe_estim.model import make_bounds, n_params, pack, unpack

from .reference import f_ref, fd_gradient, phi_ref, random_arrays

SHAPES = [(1, 2, 3, 2), (2, 3, 3, 4), (1, 1, 2, 3), (3, 4, 2, 2)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_regression_function_matches_reference(shape, gate, activation):
    rng = np.random.default_rng(hash((shape, gate, activation)) % 2**32)
    omega, M, a = random_arrays(*shape, rng)
    omega[0, 0] = -0.7  # signed omega is allowed in a measure
    X = rng.uniform(-1.5, 1.5, size=(2 * BLOCK + 17, shape[3]))  # several blocks + remainder
    got = regression_function(MixingMeasure(omega, M, a), X, gate=gate, activation=activation)
    want = f_ref(omega, M, a, X, gate, activation)
    assert got.shape == (len(X),)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_activation_values_and_derivatives(activation):
    z = np.linspace(-40, 40, 801)
    phi, dphi = activation_values(ACTIVATION_CODES[activation], z)
    np.testing.assert_allclose(phi, phi_ref(activation, z), rtol=1e-12, atol=1e-300)
    h = 1e-6
    fd = (phi_ref(activation, z + h) - phi_ref(activation, z - h)) / (2 * h)
    np.testing.assert_allclose(dphi, fd, rtol=1e-6, atol=1e-9)
    values = activation_values(ACTIVATION_CODES[activation], np.array([-1e300, 1e300]))[0]
    assert np.all(np.isfinite(values))


def _setup(shape, gate, activation, seed, near_bounds=False):
    rng = np.random.default_rng(seed)
    H, N, K, D = shape
    omega, M, a = random_arrays(H, N, K, D, rng)
    theta = pack(MixingMeasure(omega, M, a))
    if near_bounds:
        lower, upper = make_bounds(shape, omega_max=3.0, param_bound=2.5)
        pick = rng.random(theta.size) < 0.5
        theta = np.where(pick, lower + 1e-4, upper - 1e-4)
    X = rng.uniform(-1, 1, size=(BLOCK + 31, D))
    y = f_ref(omega, M, a, X, gate, activation) + 0.1 * rng.normal(size=len(X))
    XT = np.ascontiguousarray(X.T)
    codes = GATE_CODES[gate], ACTIVATION_CODES[activation]

    def value(t):
        return objective_and_gradient(t, XT, y, H, N, K, D, *codes)[0]

    return theta, X, y, XT, codes, value


@pytest.mark.parametrize("gate", GATES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("shape", [(1, 2, 3, 2), (2, 3, 2, 3)])
@pytest.mark.parametrize("near_bounds", [False, True])
def test_gradient_matches_finite_differences(gate, activation, shape, near_bounds):
    theta, X, y, XT, codes, value = _setup(shape, gate, activation, 7, near_bounds)
    obj, grad = objective_and_gradient(theta, XT, y, *shape, *codes)
    # objective is the mean squared residual of the reference model
    f = f_ref(*_arrays(theta, shape), X, gate, activation)
    assert obj == pytest.approx(np.mean((f - y) ** 2), rel=1e-12)
    fd = fd_gradient(value, theta)
    scale = np.abs(fd).max()
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * scale)


def _arrays(theta, shape):
    G = unpack(theta, shape)
    return G.omega, G.M, G.a


def test_result_independent_of_thread_count():
    import numba

    shape = (2, 3, 3, 4)
    rng = np.random.default_rng(3)
    theta = rng.normal(size=n_params(*shape))
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(4, 50 * BLOCK + 3)))
    y = rng.normal(size=XT.shape[1])
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)  # the serial variants
        v1, g1 = objective_and_gradient(theta, XT, y, *shape, 2, 0)
        f1 = predict(theta, XT, *shape, 2, 0)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # the parallel ones
        v2, g2 = objective_and_gradient(theta, XT, y, *shape, 2, 0)
        f2 = predict(theta, XT, *shape, 2, 0)
    finally:
        numba.set_num_threads(old)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)
    np.testing.assert_array_equal(f1, f2)


def test_small_inputs_run_serially_with_the_same_result():
    # below SERIAL_SAMPLES the kernels take the serial path whatever the thread count; the
    # parallel wrappers, called directly, return the same bits
    from hmoe_estim.kernels import objective as O
    from hmoe_estim.kernels.jacobian import _entry, finish_sums, gauss_newton_sums, sums_width

    shape = (1, 2, 2, 3)
    rng = np.random.default_rng(4)
    theta = rng.normal(size=n_params(*shape))
    XT = np.ascontiguousarray(rng.uniform(-1, 1, size=(3, O.SERIAL_SAMPLES - 1)))
    y = rng.normal(size=XT.shape[1])
    assert O.kernel_threads(XT.shape[1]) == 1  # serial whatever Numba's thread count
    for gate in range(4):
        bv = O.mixed_values(theta, *shape, gate)
        nchunks = O._chunks(XT.shape[1])[1]
        out = np.empty(XT.shape[1])
        _entry(True, gate, 0)(theta, XT, y, 0.0, bv, *shape[:3], gate, 0,
                              np.zeros((nchunks, 0)), out, False, 2)
        np.testing.assert_array_equal(out, O.predict(theta, XT, *shape, gate, 0))
        serial = gauss_newton_sums(theta, XT, y, *shape, gate, 0)
        partial = np.zeros((nchunks, sums_width(*shape, gate)))
        _entry(True, gate, 0)(theta, XT, y, 0.0, bv, *shape[:3], gate, 0, partial, np.zeros(0),
                              True, 2)
        parallel = finish_sums(O.chunk_total(partial), theta, *shape, gate)
        for u, v in zip(serial, parallel):  # JᵀJ, Jᵀr, Σr², ΣJ, Σr
            np.testing.assert_array_equal(u, v)


def test_extreme_inputs_give_finite_output():
    shape = (1, 3, 2, 2)
    rng = np.random.default_rng(0)
    omega, M, a = random_arrays(*shape, rng, scale=50.0)
    G = MixingMeasure(omega, M, a)
    X = np.array([[1e6, -1e6], [1e-300, 0.0], [-3e5, 7e5], [0.0, 0.0]])
    for gate in GATES:
        out = regression_function(G, X, gate=gate)
        assert np.all(np.isfinite(out))


def test_overflow_is_reported():
    G = MixingMeasure([[1.0]], np.zeros((1, 2, 2, 2)), np.ones((1, 2, 1, 2)))
    with pytest.raises(ValueError, match="overflow"):
        regression_function(G, np.array([[1e308, 1e308]]))


def test_empty_input_predict_kernel():
    out = predict(np.zeros(n_params(1, 2, 1, 2)), np.zeros((2, 0)), 1, 2, 1, 2, 0, 0)
    assert out.shape == (0,)
