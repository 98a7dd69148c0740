"""Choose the number of value channels ``K`` with ``GridSearchCV``.

``K*`` is unknown in practice (paper, Section 1). Cross-validated prediction error cannot fall by
adding channels beyond ``K*`` — an over-specified model fits the same function — but it rises
when ``K < K*``. This example searches ``n_experts`` in ``1..4`` for a G1 model (gate after the
attention output), scores every candidate by held-out ``R²`` and, because ``G*`` is known here,
also by the Voronoi loss (:func:`hmoe_estim.make_voronoi_scorer`), and refits the *smallest*
``K`` whose mean ``R²`` is within one standard error of the best (the one-standard-error rule).

Run::

    python examples/choose_k.py                       # about a minute on 2 cores
    python examples/choose_k.py --n-samples 400 --max-iter 50   # seconds
"""

import argparse
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold

from hmoe_estim import G1Regressor, make_hmoe_regression, make_voronoi_scorer, random_measure


def smallest_within_one_se(cv_results, metric="r2"):
    """Index of the smallest ``K`` whose mean test score is within one SE of the best."""
    mean = np.asarray(cv_results[f"mean_test_{metric}"])
    std = np.asarray(cv_results[f"std_test_{metric}"])
    n_splits = sum(1 for k in cv_results if k.startswith("split") and k.endswith(f"_test_{metric}"))
    best = int(np.argmax(mean))
    threshold = mean[best] - std[best] / np.sqrt(n_splits)
    ks = np.asarray(cv_results["param_n_experts"], dtype=int)
    ok = np.flatnonzero(mean >= threshold)
    return int(ok[np.argmin(ks[ok])])


def run(n_samples=3000, ks=(1, 2, 3, 4), n_splits=3, n_starts=3, max_iter=500, n_jobs=None,
        random_state=0):
    """Grid-search ``n_experts``; return the fitted ``GridSearchCV`` and the true ``K*``."""
    G = random_measure(n_heads=1, n_tokens=2, n_experts=2, n_features=3, scale=2.0,
                       random_state=random_state)
    X, y = make_hmoe_regression(n_samples, measure=G, gate="sdpa", noise=0.1,
                                random_state=random_state + 1)
    search = GridSearchCV(
        G1Regressor(n_starts=n_starts, max_iter=max_iter, random_state=random_state),
        {"n_experts": list(ks)},
        scoring={"r2": "r2", "voronoi": make_voronoi_scorer(G)},
        refit=smallest_within_one_se,
        cv=KFold(n_splits, shuffle=True, random_state=random_state),
        n_jobs=n_jobs,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        search.fit(X, y)
    return search, G.n_experts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-samples", type=int, default=3000)
    p.add_argument("--n-splits", type=int, default=3)
    p.add_argument("--n-starts", type=int, default=3)
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--n-jobs", type=int, default=None)
    args = p.parse_args(argv)
    search, k_true = run(args.n_samples, n_splits=args.n_splits, n_starts=args.n_starts,
                         max_iter=args.max_iter, n_jobs=args.n_jobs)
    res = search.cv_results_
    print(f"{'K':>3} {'mean R2':>10} {'std R2':>8} {'mean Voronoi loss':>18}")
    for j, k in enumerate(res["param_n_experts"]):
        print(f"{k:>3} {res['mean_test_r2'][j]:>10.5f} {res['std_test_r2'][j]:>8.5f} "
              f"{-res['mean_test_voronoi'][j]:>18.4f}")
    print(f"chosen K = {search.best_params_['n_experts']} (true K* = {k_true})")
    return search


if __name__ == "__main__":
    main()
