"""Learning curve of the Voronoi loss with scikit-learn's ``learning_curve``.

The question of the paper — how fast do the experts of a gated attention layer become
identifiable as the sample grows? — asked with scikit-learn's own tools: fit a G2 model
(gate after the value projection) on growing training sets drawn from a known ``G*`` and
score each fit with :func:`hmoe_estim.make_voronoi_scorer`, which compares the fitted mixing
measure with ``G*`` (the test split is not used by this scorer: the loss is a property of the
parameters). The slope of ``log loss`` against ``log n`` is then fitted with
:func:`hmoe_estim.study.fit_power_law`.

For a whole study — several models, replications, resumable and parallel runs, bootstrap
intervals, plots — use the command line: ``hmoe-estim reproduce --quick``.

Run::

    python examples/learning_curve.py                 # about a minute on 2 cores
    python examples/learning_curve.py --n-samples 600 --max-iter 50   # seconds
"""

import argparse
import warnings

from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import ShuffleSplit, learning_curve

from hmoe_estim import G2Regressor, make_hmoe_regression, make_voronoi_scorer, random_measure
from hmoe_estim.study import fit_power_law


def run(n_samples=4000, train_sizes=(0.1, 0.25, 0.5, 1.0), n_splits=3, n_starts=2,
        max_iter=500, n_jobs=None, random_state=0):
    """Fit G2 on growing training sets and return ``(sizes, voronoi_loss)``.

    Returns
    -------
    sizes : ndarray of shape (n_sizes,)
        Training-set sizes used by ``learning_curve``.
    loss : ndarray of shape (n_sizes, n_splits)
        ``L_2`` Voronoi loss of each fit against ``G*``.
    """
    # the true measure: D = 3, H* = 1, N* = 2, K* = 2, entries of size ~2
    # (docs, Theory to code: the experiment template)
    G = random_measure(n_heads=1, n_tokens=2, n_experts=2, n_features=3, scale=2.0,
                       random_state=random_state)
    X, y = make_hmoe_regression(n_samples, measure=G, gate="value", noise=0.1,
                                random_state=random_state + 1)
    # over-specified fit: K = K* + 1, ordinary random multi-starts
    est = G2Regressor(n_experts=3, n_starts=n_starts, max_iter=max_iter,
                      random_state=random_state)
    cv = ShuffleSplit(n_splits=n_splits, test_size=0.2, random_state=random_state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        sizes, _, test_scores = learning_curve(
            est, X, y, train_sizes=list(train_sizes), cv=cv,
            scoring=make_voronoi_scorer(G), n_jobs=n_jobs,
        )
    return sizes, -test_scores  # the scorer returns -loss (greater is better)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-samples", type=int, default=4000)
    p.add_argument("--n-splits", type=int, default=3)
    p.add_argument("--n-starts", type=int, default=2)
    p.add_argument("--max-iter", type=int, default=500)
    p.add_argument("--n-jobs", type=int, default=None)
    args = p.parse_args(argv)
    sizes, loss = run(args.n_samples, n_splits=args.n_splits, n_starts=args.n_starts,
                      max_iter=args.max_iter, n_jobs=args.n_jobs)
    print(f"{'n train':>8} {'mean Voronoi loss':>18} {'std':>8}")
    for n, row in zip(sizes, loss):
        print(f"{n:>8d} {row.mean():>18.4f} {row.std():>8.4f}")
    fit = fit_power_law(sizes, loss.mean(axis=1))
    print(f"power law: loss ~ {fit['c']:.3g} * n^({fit['slope']:.2f})")
    return sizes, loss


if __name__ == "__main__":
    main()
