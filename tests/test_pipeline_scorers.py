"""Theory scorers on scikit-learn pipelines: the fitted measure mapped back to raw coordinates
through per-feature scalings (``M = S M' S``, ``a = S a'``), and a clear error elsewhere."""

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.model_selection import cross_validate, learning_curve
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    StandardScaler,
)

from hmoe_estim import (
    G2Regressor,
    HMoERegressor,
    MixingMeasure,
    make_expert_error_scorer,
    make_regression_error_scorer,
    make_voronoi_scorer,
    regression_function,
    voronoi_loss,
)
from hmoe_estim.metrics import expert_error, fitted_measure, pipeline_scale, regression_error

from .reference import random_arrays

pytestmark = [pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

MAKERS = [make_voronoi_scorer, make_expert_error_scorer, make_regression_error_scorer]
METRICS = [voronoi_loss, expert_error, regression_error]
SCALES = np.array([3.0, 0.25])


@pytest.fixture(scope="module")
def problem():
    """A G2 truth in raw coordinates and data whose features have unequal scales."""
    rng = np.random.default_rng(0)
    Gs = MixingMeasure(*random_arrays(1, 2, 2, 2, rng)).normalized()
    X = rng.uniform(-1, 1, size=(300, 2)) * SCALES
    y = regression_function(Gs, X, gate="value", activation="tanh") + 0.05 * rng.normal(size=300)
    return Gs, X, y


def tiny(**kw):
    params = dict(n_heads=1, n_tokens=2, n_experts=2, n_starts=1, max_iter=30, random_state=0,
                  gate="value", activation="tanh")
    params.update(kw)
    return HMoERegressor(**params)


def by_hand(measure, s):
    """``(ω, S M S, S a)`` written out entry by entry."""
    M = np.empty_like(measure.M)
    a = np.empty_like(measure.a)
    H, N, K, D = measure.shape
    for h in range(H):
        for i in range(N):
            for p in range(D):
                for q in range(D):
                    M[h, i, p, q] = s[p] * measure.M[h, i, p, q] * s[q]
                for k in range(K):
                    a[h, i, k, p] = s[p] * measure.a[h, i, k, p]
    return MixingMeasure(measure.omega, M, a)


@pytest.fixture(scope="module")
def fitted_pipe(problem):
    _, X, y = problem
    return make_pipeline(StandardScaler(with_mean=False), "passthrough", MaxAbsScaler(),
                         FunctionTransformer(), tiny(fit_intercept=True)).fit(X, y)


@pytest.mark.parametrize("gate", ["none", "value", "sdpa", "output"])
def test_mapped_measure_predicts_like_the_pipeline(gate, problem):
    """The map is exact: f of the mapped measure on raw X (plus the final step's intercept,
    which the map leaves alone) is the pipeline's prediction, for every gate."""
    _, X, y = problem
    pipe = make_pipeline(StandardScaler(with_mean=False), MaxAbsScaler(),
                         tiny(gate=gate, fit_intercept=True)).fit(X, y)
    s = 1.0 / (pipe[0].scale_ * pipe[1].scale_)
    np.testing.assert_allclose(pipeline_scale(pipe), s, rtol=1e-15)
    G = fitted_measure(pipe)
    assert G.is_normalized()
    f = regression_function(G, X, gate=gate, activation="tanh") + pipe[-1].intercept_
    np.testing.assert_allclose(f, pipe.predict(X), rtol=0, atol=1e-8)
    # and it is not the unmapped measure
    assert np.max(np.abs(regression_function(pipe[-1].measure_, X, gate=gate, activation="tanh")
                         + pipe[-1].intercept_ - pipe.predict(X))) > 1e-3


@pytest.mark.parametrize("maker, metric", list(zip(MAKERS, METRICS)))
def test_scorer_on_pipeline_is_metric_of_mapped_measure(maker, metric, problem, fitted_pipe):
    Gs, X, y = problem
    s = 1.0 / (fitted_pipe[0].scale_ * fitted_pipe[2].scale_)
    G = by_hand(fitted_pipe[-1].measure_, s)
    np.testing.assert_allclose(fitted_measure(fitted_pipe).M, G.M, rtol=1e-14, atol=0)
    np.testing.assert_allclose(fitted_measure(fitted_pipe).a, G.a, rtol=1e-14, atol=0)
    f = regression_function(G, X, gate="value", activation="tanh")
    np.testing.assert_allclose(f + fitted_pipe[-1].intercept_, fitted_pipe.predict(X), rtol=0,
                               atol=1e-8)
    want = -metric(G, Gs, gate="value", activation="tanh", n_ref=512)
    assert maker(Gs, n_ref=512)(fitted_pipe, X, y) == pytest.approx(want, rel=1e-8, abs=1e-12)
    # the final step alone is scored in its own (scaled) coordinates: another number
    alone = maker(Gs, n_ref=512)(fitted_pipe[-1], X, y)
    assert alone != pytest.approx(want, rel=1e-3)


def test_pipeline_scores_like_the_estimator_on_unscaled_data():
    """StandardScaler(with_mean=False) + estimator on X scores what the estimator scores on X
    (same random_state), to 1e-8.

    The two fits are one problem only in these conditions, which the test sets: the
    estimator scales its inputs internally by the power of two nearest their root mean
    square, so the scaler's scale must be that power of two (every column here has standard
    deviation exactly 64: values ±32 and ±96), and the box of (A.1) is set in the coordinates
    each estimator sees, so the pipeline's ``param_bound`` is the raw fit's times 64 (the box
    of ``a`` then matches; the raw box of ``M`` is wider still and inactive). With the default
    box in both, or other scales, they are two searches that agree as far as both find the
    same optimum (on this data with ``param_bound=10`` in both: 1e-4 apart)."""
    rng = np.random.default_rng(1)
    Gs = MixingMeasure(*random_arrays(1, 2, 2, 2, rng)).normalized()
    n = 320
    vals = np.repeat([0.5, -0.5, 1.5, -1.5], [n * 5 // 16, n * 5 // 16, n * 3 // 16, n * 3 // 16])
    Z = np.column_stack([rng.permutation(vals), rng.permutation(vals)])  # std exactly 1
    X = 64.0 * Z
    y = regression_function(Gs, Z, gate="value") + 0.05 * rng.normal(size=n)
    G_raw = MixingMeasure(Gs.omega, Gs.M / 64.0**2, Gs.a / 64.0)  # the truth on X
    kw = dict(n_experts=2, n_starts=2, max_iter=30, random_state=0)
    pipe = make_pipeline(StandardScaler(with_mean=False),
                         G2Regressor(param_bound=640.0, **kw)).fit(X, y)
    assert np.array_equal(pipe[0].scale_, [64.0, 64.0])
    raw = G2Regressor(**kw).fit(X, y)
    assert pipe[-1].objective_ == pytest.approx(raw.objective_, rel=1e-12)
    np.testing.assert_allclose(pipe.predict(X), raw.predict(X), rtol=0, atol=1e-8)
    for maker in MAKERS:
        scorer = maker(G_raw, n_ref=512)
        assert scorer(pipe, X, y) == pytest.approx(scorer(raw, X, y), rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("step, match", [
    (StandardScaler(), r"'standardscaler' \(StandardScaler\) centres the inputs "
                       r"\(with_mean=True\).*with_mean=False.*pipeline\[-1\]"),
    (RobustScaler(), r"'robustscaler' \(RobustScaler\) centres.*with_mean=False"),
    (PCA(n_components=2), r"'pca' \(PCA\) is not a per-feature scaling.*with_mean=False"),
    (MinMaxScaler(), r"'minmaxscaler' \(MinMaxScaler\) is not a per-feature scaling"),
    (FunctionTransformer(np.tanh), r"'functiontransformer'.*applies 'tanh'"),
])
def test_inexact_steps_are_refused(step, match, problem, fitted_pipe):
    Gs, X, y = problem
    pipe = Pipeline([(type(step).__name__.lower(), step.fit(X)), ("est", fitted_pipe[-1])])
    for maker in MAKERS:
        with pytest.raises(ValueError, match=match):
            maker(Gs)(pipe, X, y)
    with pytest.raises(ValueError, match=match):
        fitted_measure(pipe)
    # a nested pipeline names the step by its path
    nested = Pipeline([("prep", Pipeline([("ok", MaxAbsScaler().fit(X)), ("bad", step)])),
                       ("est", fitted_pipe[-1])])
    with pytest.raises(ValueError, match="'prep__bad'"):
        make_voronoi_scorer(Gs)(nested, X, y)


def test_exact_steps_and_identities(problem, fitted_pipe):
    Gs, X, y = problem
    est = fitted_pipe[-1]
    G0 = est.measure_
    for step in (StandardScaler(with_mean=False, with_std=False), FunctionTransformer(),
                 RobustScaler(with_centering=False, with_scaling=False)):
        pipe = Pipeline([("id", step.fit(X)), ("none", None), ("est", est)])
        assert pipeline_scale(pipe) is None
        assert fitted_measure(pipe) == G0
    rob = RobustScaler(with_centering=False).fit(X)
    pipe = Pipeline([("rob", rob), ("est", est)])
    np.testing.assert_allclose(fitted_measure(pipe).a, by_hand(G0, 1.0 / rob.scale_).a,
                               rtol=1e-14)
    assert fitted_measure(est) is G0


def test_constant_feature_is_mapped_exactly():
    """scikit-learn replaces a zero scale by 1 (the feature passes unchanged): still exact."""
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.uniform(-2, 2, 200), np.full(200, 0.5)])
    y = np.tanh(X[:, 0]) + 0.05 * rng.normal(size=200)
    pipe = make_pipeline(StandardScaler(with_mean=False), tiny(fit_intercept=True)).fit(X, y)
    assert pipe[0].scale_[1] == 1.0
    G = fitted_measure(pipe)
    f = regression_function(G, X, gate="value", activation="tanh") + pipe[-1].intercept_
    np.testing.assert_allclose(f, pipe.predict(X), rtol=0, atol=1e-8)


def test_unfitted_scaler_is_reported(problem, fitted_pipe):
    Gs, X, y = problem
    pipe = Pipeline([("scale", MaxAbsScaler()), ("est", fitted_pipe[-1])])
    with pytest.raises(ValueError, match="'scale' .* not fitted"):
        make_voronoi_scorer(Gs)(pipe, X, y)


def test_cross_validate_and_learning_curve_on_pipelines(problem):
    Gs, X, y = problem
    scorer = make_voronoi_scorer(Gs, n_ref=256)
    good = make_pipeline(StandardScaler(with_mean=False), tiny(max_iter=10))
    res = cross_validate(good, X, y, cv=2, scoring={"voronoi": scorer, "r2": "r2"},
                         return_estimator=True)
    assert np.all(np.isfinite(res["test_voronoi"])) and np.all(res["test_voronoi"] <= 0)
    for est, score in zip(res["estimator"], res["test_voronoi"]):
        assert score == pytest.approx(-voronoi_loss(fitted_measure(est), Gs, gate="value",
                                                    activation="tanh", n_ref=256), rel=1e-12)
    _, train, test = learning_curve(good, X, y, train_sizes=[0.5, 1.0], cv=2, scoring=scorer)
    assert np.all(np.isfinite(train)) and np.all(np.isfinite(test))
    bad = make_pipeline(StandardScaler(), tiny(max_iter=10))
    with pytest.raises(ValueError, match="with_mean=False"):
        cross_validate(bad, X, y, cv=2, scoring=scorer, error_score="raise")
