"""``AttentionLayerRegressor``: a small layer is recovered to its gauge from noiseless data (MHA
and G1), its predictions are the fitted layer's output, fits are reproducible, bad input is
refused with a message that says what to change, ``entry_measure`` is the entry's HMoE, and
the scikit-learn API checks that apply to an estimator of 3-D input pass."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError, SkipTestWarning
from sklearn.utils import estimator_checks as sk_checks

from hmoe_estim import regression_function
from hmoe_estim.layer import (
    AttentionLayerRegressor,
    attention_layer_output,
    make_attention_regression,
    random_attention_layer,
)


def _data(gate="none", n=150, rows="all", seed=0, d_out=None, **form):
    truth = random_attention_layer(1, 2, 2, d_out, scale=1.5, random_state=seed, **form)
    X, Y = make_attention_regression(n, truth, n_tokens=3, gate=gate, rows=rows,
                                     random_state=seed + 1)
    return truth, X, Y


def _quick(**kw):
    """A cheap fit (one start, few iterations): for the tests that do not need the optimum."""
    return AttentionLayerRegressor(n_starts=1, max_iter=15, random_state=0, **kw)


@pytest.mark.parametrize("gate", ["none", "sdpa"])
def test_recovers_a_small_layer_to_its_gauge(gate):
    truth, X, Y = _data(gate)
    est = AttentionLayerRegressor(gate=gate, n_starts=2, random_state=0).fit(X, Y)
    assert est.objective_ < 1e-20
    assert np.linalg.norm(est.P_ - truth.P_) < 1e-6
    assert np.linalg.norm(est.VO_ - truth.VO_) < 1e-6
    np.testing.assert_array_equal(est.predict(X),
                                  attention_layer_output(X, est.layer_, gate=gate))
    assert est.score(X, Y) > 1 - 1e-12
    assert est.converged_ and est.n_iter_ >= 1 and est.n_rounds_agreeing_ >= 1
    assert est.search_stop_ in ("agreement", "rounds")
    assert set(est.search_cost_) >= {"race", "converge"}
    assert est.n_features_in_ == 2 and est.n_tokens_ == 3 and est.d_out_ == 2
    assert est.W_Q_.shape == est.W_K_.shape == est.W_V_.shape == (1, 2, 2)
    assert est.W_O_.shape == (1, 2, 2)
    np.testing.assert_array_equal(est.intercept_, np.zeros(2))
    assert not hasattr(est, "W_theta_")


def test_same_random_state_same_fit():
    _, X, Y = _data(n=80)
    a = AttentionLayerRegressor(n_starts=1, random_state=3).fit(X, Y)
    b = AttentionLayerRegressor(n_starts=1, random_state=3).fit(X, Y)
    np.testing.assert_array_equal(a.theta_, b.theta_)
    assert a.objective_ == b.objective_


def test_forms_rows_and_attributes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, X, Y = _data("sdpa", n=60, gate_form="multiplicative", granularity="elementwise")
        est = _quick(gate="sdpa", gate_form="multiplicative", granularity="elementwise")
        est.fit(X, Y)
        assert est.W_theta_.shape == (1, 2, 2) and est.predict(X).shape == Y.shape
        _, X, Y = _data("value", n=60, rows="last", d_out=3, fit_intercept=True)
        est = _quick(gate="value", rows="last", fit_intercept=True, qk="full").fit(X, Y)
    assert Y.shape == (60, 3) and est.predict(X).shape == (60, 3)
    assert est.P_.shape == (1, 2, 2) and not hasattr(est, "W_Q_")
    assert est.intercept_.shape == (3,) and est.VO_.shape == (1, 2, 3)
    # another sequence length at prediction
    assert est.predict(X[:, :2]).shape == (60, 3)


def _bad_cases():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3, 2))
    Y = rng.normal(size=(20, 3, 2))
    nan = X.copy()
    nan[0, 0, 0] = np.nan
    return [
        ({}, X[:, 0], Y, r"X must have shape \(n, N, d\)"),
        ({}, X, Y[:-1], r"Y must have shape \(n, N, d_out\) = \(20, 3, d_out\)"),
        ({}, X, Y[:, :2], r"Y must have shape \(n, N, d_out\)"),
        ({"rows": "last"}, X, Y, r"Y must have shape \(n, d_out\) = \(20, d_out\)"),
        ({}, nan, Y, "X contains NaN"),
        ({}, X, np.where(Y > 1, np.inf, Y), "Y contains NaN or infinite"),
        ({}, X[:1], Y[:1], "at least 2 samples"),
        ({"n_heads": 3}, X[:2], Y[:2], "under-determined"),
        ({"head_dim": 3}, X, Y, r"head_dim=3 > d=2 .* qk='factored'"),
        ({"gate": "G1"}, X, Y, "Unknown gate 'G1'"),
        ({"gate_form": "mult"}, X, Y, "Unknown gate_form"),
        ({"granularity": "rowwise"}, X, Y, "Unknown granularity"),
        ({"qk": "half"}, X, Y, "Unknown qk"),
        ({"activation": "relu"}, X, Y, "Unknown activation"),
        ({"gate_form": "multiplicative"}, X, Y, "use gate='sdpa'"),
        ({"qk": "full", "gate": "key"}, X, Y, "qk='full' needs bilinear scores"),
        ({"alpha": -0.1}, X, Y, "alpha"),
        ({"varpro": True, "gate": "output"}, X, Y, "needs a layer linear in W_O"),
        ({"varpro": "yes"}, X, Y, "varpro must be"),
        ({"n_starts": 0}, X, Y, "n_starts must be an integer >= 1"),
    ]


@pytest.mark.parametrize("kw, X, Y, match", _bad_cases())
def test_bad_input_is_refused(kw, X, Y, match):
    with pytest.raises(ValueError, match=match):
        AttentionLayerRegressor(**kw).fit(X, Y)


def test_entry_measure_is_the_entrys_hmoe():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for kw, rows, d_out in (({"gate": "sdpa", "fit_intercept": True}, "all", None),
                                ({"gate": "output", "qk": "full"}, "last", 3)):
            _, X, Y = _data(kw["gate"], n=40, rows=rows, d_out=d_out)
            est = _quick(rows=rows, **kw).fit(X, Y)
            row, column = (1, 0) if rows == "all" else (2, 2)
            G = est.entry_measure(row, column)
            assert G.shape == (1, 3, 2, 6)
            entry = regression_function(G, X.reshape(len(X), -1), gate=est.gate,
                                        activation=est.activation) + est.intercept_[column]
            pred = est.predict(X)
            pred = pred[:, row, column] if rows == "all" else pred[:, column]
            np.testing.assert_allclose(entry, pred, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"column must be an integer in \[0, 3\)"):
        est.entry_measure(0, 3)
    _, X, Y = _data("key", n=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = _quick(gate="key").fit(X, Y)
    with pytest.raises(ValueError, match="an entry of the layer is an HMoE"):
        est.entry_measure(0, 0)


def test_params_round_trip_and_not_fitted():
    est = AttentionLayerRegressor(n_heads=2, gate="sdpa", gate_form="multiplicative",
                                  random_state=1, alpha=0.0)
    params = est.get_params()
    copy = clone(est)
    assert copy.get_params() == params
    assert AttentionLayerRegressor().set_params(**params).get_params() == params
    with pytest.raises(NotFittedError):
        est.predict(np.zeros((1, 3, 2)))
    _, X, Y = _data(n=40)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = _quick().fit(X, Y)
    assert fitted.get_params() == _quick().get_params()  # fit leaves the parameters alone
    with pytest.raises(ValueError, match="d = 2"):
        fitted.predict(np.zeros((1, 3, 4)))


#: The scikit-learn checks that apply to an estimator of 3-D input. With the tag
#: ``input_tags.three_d_array`` (and ``two_d_array=False``) ``parametrize_with_checks`` runs
#: only ``check_estimator_cloneable``: every other generic check fits on 2-D X. These are the
#: checks of the estimator's API that need no data.
API_CHECKS = [
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_estimator_tags_renamed",
    "check_valid_tag_types",
    "check_mixin_order",
]


@pytest.mark.parametrize("check", API_CHECKS)
def test_sklearn_api_checks(check):
    est = AttentionLayerRegressor(n_starts=1, max_iter=10)
    getattr(sk_checks, check)(type(est).__name__, est)


with warnings.catch_warnings():  # sklearn skips the 2-D checks with a SkipTestWarning
    warnings.simplefilter("ignore", SkipTestWarning)
    _SKLEARN_CHECKS = sk_checks.parametrize_with_checks(
        [AttentionLayerRegressor(n_starts=1, max_iter=10)])


@_SKLEARN_CHECKS
def test_sklearn_parametrized_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("H, gate, starts, candidates", [
    (1, "none", 2, 4), (1, "sdpa", 2, 4), (2, "none", 2, 4), (2, "value", 4, 32),
    (3, "none", 4, 32)])
def test_default_search_is_sized_by_the_layer(H, gate, starts, candidates):
    """One head or two ungated heads: 2 starts from 4 candidates; else 4 from 32; a given
    n_starts keeps the layer's candidates per start."""
    truth = random_attention_layer(H, 2, 2, random_state=0)
    X, Y = make_attention_regression(40, truth, n_tokens=2, gate=gate, noise=0.1,
                                     random_state=1)
    est = AttentionLayerRegressor(n_heads=H, gate=gate, max_iter=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, Y)
    assert (est.schedule_["n_starts"], est.schedule_["n_candidates"]) == (starts, candidates)
    est.set_params(n_starts=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, Y)
    assert est.schedule_["n_candidates"] == candidates // starts


def test_rounds_that_run_out_unconfirmed_warn():
    from hmoe_estim.solvers import Search

    _, X, Y = _data(n=60)
    # agree=3 with two rounds: the rounds cannot confirm the optimum
    est = AttentionLayerRegressor(
        n_starts=1, random_state=0,
        solver=Search(n_candidates=2, race_iter=2, rounds=2, agree=3, moves=[]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, Y)
    notices = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)
               and "local optimum" in str(w.message)]
    assert est.search_stop_ == "rounds" and est.search_rounds_ == 2
    assert len(notices) == 1 and "of its 2 rounds" in notices[0]
