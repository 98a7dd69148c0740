"""Numba kernels: activations, the token gate, and the fused objective and gradient.

Plain ``@njit(cache=True)`` functions, one concept per module; the estimator code in
``hmoe_estim/estimators/_regressor.py`` calls them with ``theta`` in the layout of
``hmoe_estim/model/_parameters.py``.

``objective`` (block forward/backward passes, fused objective + gradient), ``jacobian``
(one pass for prediction and the Gauss–Newton sums ``JᵀJ``, ``Jᵀr``), ``gate`` (pair products,
softmax gate), ``activations`` (φ and φ'), ``rows`` (row combinations and dot products),
``vexp`` (vectorisable ``exp``), ``target`` (full vector width on AVX-512 machines, options of
the internal functions).
"""
