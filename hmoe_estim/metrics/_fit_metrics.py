"""Every metric of the theory for one fitted measure, from one set of Voronoi cells.

The Voronoi loss, the expert error and their measure-level readings all start from the
Voronoi cells, whose cost is the branch functions of both measures on the reference sample
(the rest is small). Each public metric computes its own cells; :func:`fit_metrics` computes
them once per level and returns what a study records for a fit — the same numbers, bit for
bit, as the separate calls.
"""

import numpy as np

from .._validation import check_activation, check_gate, check_r
from ._atoms import MEASURE_GATES, measure_details, measure_expert_errors
from ._branches import DEFAULT_N_REF, check_measure_pair, reference_sample, resolve_expert
from ._expert import WEIGHTINGS, channel_expert_errors, regression_error
from ._voronoi import _voronoi_details, voronoi_cells

__all__ = ["fit_metrics"]

#: Record names of the expert error under each weighting of :data:`WEIGHTINGS`.
_EXPERT_FIELDS = {"heaviest": "expert_error", "weighted": "expert_error_weighted",
                  "max": "expert_error_max"}


def fit_metrics(measure, true_measure, *, gate="none", activation="sigmoid", X_ref=None, r=None,
                n_ref=DEFAULT_N_REF, random_state=0):
    """The theory's metrics of a fitted ``measure`` against ``true_measure``, as one dict.

    Equal to the separate calls with the same arguments (default ``token_matching`` and
    ``sign_symmetry``): :func:`~hmoe_estim.voronoi_loss` (``r``) with its parts,
    :func:`~hmoe_estim.metrics.expert_error` under each weighting,
    :func:`~hmoe_estim.metrics.regression_error` and, for a gate whose regression function the
    measure determines (G2), the measure-level loss and heaviest-atom expert error
    (``level="measure"``). The Voronoi cells are computed once per level.

    Parameters
    ----------
    measure : MixingMeasure
        Fitted ``G``.
    true_measure : MixingMeasure
        True ``G*`` (same ``N`` and ``D``).
    gate : {"none", "value", "sdpa", "output"}, default="none"
    activation : {"sigmoid", "tanh", "gelu", "silu"}, default="sigmoid"
    X_ref : array-like of shape (n_ref, D), optional
        Reference sample; default ``n_ref`` points uniform on ``[-1, 1]^D``.
    r : int or None, default=None
        ``r`` of the loss ``L_{1,r}``; ``None`` for ``L_2``. The expert error always uses the
        ``L_2`` cells' token matching, as :func:`~hmoe_estim.metrics.expert_error` does.
    n_ref : int, default=4096
    random_state : int, default=0

    Returns
    -------
    dict
        ``voronoi_loss`` and its parts ``voronoi_weight``, ``voronoi_exact``,
        ``voronoi_over``; ``voronoi_r``; the weights of the extra atoms of over-specified
        cells (``extra_weights``, their sum ``extra_weight``); ``cell_sizes`` (H*, K*) as
        lists; ``expert_error`` (heaviest atom), ``expert_error_weighted``,
        ``expert_error_max``; ``regression_error``; for G2 also ``voronoi_loss_measure`` and
        ``expert_error_measure``. Plain floats and lists (JSON-ready).

    Raises
    ------
    ValueError
        As the separate metrics: measures with different ``N`` or ``D``, a bad ``X_ref``,
        unknown gate or activation, a bad ``r``.

    Examples
    --------
    >>> from hmoe_estim import fit_metrics, random_measure
    >>> G = random_measure(1, 2, 2, 2, random_state=0)
    >>> m = fit_metrics(G, G, gate="sdpa")
    >>> m["voronoi_loss"], m["expert_error"], m["cell_sizes"]
    (0.0, 0.0, [[1, 1]])
    """
    r = check_r(r)
    check_gate(gate)
    check_activation(activation)
    check_measure_pair(measure, true_measure, same_tokens=True)
    X = reference_sample(measure.n_features, X_ref, n_ref=n_ref, random_state=random_state)
    reading = resolve_expert(gate, "auto")
    kw = dict(gate=gate, activation=activation, X_ref=X)
    cells = voronoi_cells(measure, true_measure, **kw)
    det = _voronoi_details(measure, true_measure, cells, r, "auto")
    det2 = det if r is None else _voronoi_details(measure, true_measure, cells, None, "auto")
    out = {
        "voronoi_loss": float(det.loss),
        "voronoi_weight": float(det.weight_part),
        "voronoi_exact": float(det.exact_part),
        "voronoi_over": float(det.over_part),
        "voronoi_r": r,
        "extra_weights": [float(w) for w in det.extra_weights],
        "extra_weight": float(np.sum(det.extra_weights)),
        "cell_sizes": det.cells.sizes.tolist(),
    }
    for weighting in WEIGHTINGS:
        errors = channel_expert_errors(measure, true_measure, det2, X, expert=reading,
                                       activation=activation, weighting=weighting)
        out[_EXPERT_FIELDS[weighting]] = float(errors.max())
    out["regression_error"] = regression_error(measure, true_measure, **kw)
    if gate in MEASURE_GATES:
        atoms = voronoi_cells(measure, true_measure, level="measure", **kw)
        out["voronoi_loss_measure"] = float(
            measure_details(measure, true_measure, atoms, r, "auto").loss)
        errors = measure_expert_errors(measure, true_measure, atoms, X, expert=reading,
                                       activation=activation, weighting="heaviest")
        out["expert_error_measure"] = float(np.nanmax(errors))
    return out
