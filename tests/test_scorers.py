"""scikit-learn scorers of the theory metrics: values, model selection, pickling, errors."""

import pickle

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.model_selection import GridSearchCV, cross_validate, learning_curve
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer

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
from hmoe_estim.metrics import expert_error, regression_error

from .reference import random_arrays

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

MAKERS = [make_voronoi_scorer, make_expert_error_scorer, make_regression_error_scorer]
METRICS = [voronoi_loss, expert_error, regression_error]


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    Gs = MixingMeasure(*random_arrays(1, 2, 2, 2, rng)).normalized()
    X = rng.uniform(-1, 1, size=(200, 2))
    y = regression_function(Gs, X) + 0.05 * rng.normal(size=200)
    return Gs, X, y


def tiny(**kw):
    params = dict(n_heads=1, n_tokens=2, n_experts=2, n_starts=1, max_iter=50, random_state=0)
    params.update(kw)
    return HMoERegressor(**params)


class FittedStandIn:
    """Duck-typed fitted estimator: the scorers only read measure_, gate, activation."""

    def __init__(self, measure, gate="none", activation="sigmoid"):
        self.measure_, self.gate, self.activation = measure, gate, activation


@pytest.mark.parametrize("maker, metric", list(zip(MAKERS, METRICS)))
@pytest.mark.parametrize("gate", ["none", "value"])
def test_scorer_is_negated_metric(maker, metric, gate, problem):
    Gs, X, y = problem
    rng = np.random.default_rng(1)
    G = MixingMeasure(Gs.omega + 0.1, Gs.M + 0.2, Gs.a + 0.1 * rng.normal(size=Gs.a.shape))
    X_ref = rng.uniform(-1, 1, size=(300, 2))
    scorer = maker(Gs, X_ref=X_ref)
    est = FittedStandIn(G, gate=gate, activation="tanh")
    want = metric(G, Gs, gate=gate, activation="tanh", X_ref=X_ref)
    assert want > 0
    assert scorer(est, X, y) == pytest.approx(-want, rel=1e-12)
    assert maker(Gs)(FittedStandIn(Gs, gate=gate), X, y) == pytest.approx(0.0, abs=1e-12)
    # kwargs reach the metric
    if metric is voronoi_loss:
        assert maker(Gs, r=3, X_ref=X_ref)(est, X, y) == pytest.approx(
            -voronoi_loss(G, Gs, gate=gate, activation="tanh", X_ref=X_ref, r=3)
        )


@pytest.mark.parametrize("maker, metric", list(zip(MAKERS, METRICS)))
def test_scorer_reads_fitted_estimator_and_pipeline(maker, metric, problem):
    Gs, X, y = problem
    est = tiny(gate="value", activation="tanh").fit(X, y)
    want = -metric(est.measure_, Gs, gate="value", activation="tanh")
    assert maker(Gs)(est, X, y) == pytest.approx(want, rel=1e-12)
    pipe = make_pipeline(FunctionTransformer(), tiny(gate="value", activation="tanh")).fit(X, y)
    assert maker(Gs)(pipe, X, y) == pytest.approx(want, rel=1e-12)
    # presets carry their gate as a class attribute
    g2 = G2Regressor(n_experts=2, n_tokens=2, n_starts=1, max_iter=50, random_state=0).fit(X, y)
    assert maker(Gs)(g2, X, y) == pytest.approx(-metric(g2.measure_, Gs, gate="value"), rel=1e-12)


@pytest.mark.parametrize("maker", MAKERS)
def test_grid_search_and_learning_curve_parallel(maker, problem):
    Gs, X, y = problem
    scorer = maker(Gs, n_ref=512)
    search = GridSearchCV(tiny(), {"n_experts": [1, 2, 3]}, scoring=scorer, cv=2, n_jobs=2)
    search.fit(X, y)
    scores = search.cv_results_["mean_test_score"]
    assert scores.shape == (3,) and np.all(np.isfinite(scores)) and np.all(scores <= 0)
    _, train_scores, test_scores = learning_curve(
        tiny(), X, y, train_sizes=[0.5, 1.0], cv=2, scoring=scorer, n_jobs=2
    )
    assert np.all(np.isfinite(test_scores)) and np.all(np.isfinite(train_scores))
    res = cross_validate(tiny(), X, y, cv=2, scoring={"metric": scorer, "r2": "r2"}, n_jobs=2)
    assert np.all(np.isfinite(res["test_metric"]))


@pytest.mark.parametrize("maker", MAKERS)
def test_picklable(maker, problem):
    Gs, X, y = problem
    scorer = maker(Gs, X_ref=np.zeros((3, 2)))
    clone = pickle.loads(pickle.dumps(scorer))
    est = FittedStandIn(Gs)
    assert clone(est, X, y) == scorer(est, X, y)
    assert "scorer" in repr(scorer)


@pytest.mark.parametrize("maker", MAKERS)
def test_errors(maker, problem):
    Gs, X, y = problem
    scorer = maker(Gs)
    with pytest.raises(NotFittedError, match="not fitted"):
        scorer(tiny(), X, y)
    with pytest.raises(ValueError, match="not fitted"):  # NotFittedError is a ValueError
        scorer(make_pipeline(FunctionTransformer(), tiny()), X, y)
    other = MixingMeasure(*random_arrays(1, 2, 2, 3, np.random.default_rng(2)))
    with pytest.raises(ValueError, match="3 features but the true measure has 2"):
        scorer(FittedStandIn(other), X, y)
    with pytest.raises(ValueError, match="gate/activation"):
        scorer(type("NoGate", (), {"measure_": Gs})(), X, y)
    with pytest.raises(ValueError, match="read from the fitted estimator"):
        maker(Gs, gate="value")
    with pytest.raises(ValueError, match="takes no argument"):
        maker(Gs, bogus=1)
    with pytest.raises(ValueError, match="MixingMeasure"):
        maker(Gs.to_dict())


def test_voronoi_scorer_token_mismatch(problem):
    Gs, X, y = problem
    est = tiny(n_tokens=3).fit(X, y)
    with pytest.raises(ValueError, match="n_tokens=2"):
        make_voronoi_scorer(Gs)(est, X, y)
    # the regression error does not need matching tokens
    assert np.isfinite(make_regression_error_scorer(Gs)(est, X, y))
