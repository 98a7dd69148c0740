"""Numba kernels: activations, the token gate, and the fused objective and gradient.

Plain ``@njit(cache=True)`` functions, one concept per module; the model, the solvers and the
metrics call them with ``theta`` in the layout of ``kernels/layout.py``.

``objective`` (block forward/backward passes, fused objective + gradient), ``jacobian``
(one pass for prediction and the Gauss–Newton sums ``JᵀJ``, ``Jᵀr``), ``passes`` (those passes
set up once per data set for the solvers), ``lm_step`` (the compiled helpers of a
Levenberg–Marquardt iteration), ``layout`` (offsets of ``theta``), ``threads`` (Numba and BLAS
thread contexts), ``gate`` (pair products, softmax gate), ``activations`` (φ and φ'), ``rows``
(row combinations and dot products), ``vexp`` (vectorisable ``exp``), ``target`` (full vector
width on AVX-512 machines, options of the internal functions), ``background`` (compilation
on an idle core), ``layer`` (a whole attention layer: forward pass, Jacobian, Gauss–Newton
sums and their passes).

The other subpackages import these names from here; each is loaded on first use (PEP 562),
so that importing one kernel does not compile or load the others.
"""

from .._lazy import attach

#: public name -> module of this package that defines it
_LAZY = {
    "theta_offsets": "layout",
    "offsets": "layout",
    "predict": "objective",
    "objective_and_gradient": "objective",
    "penalty_weights": "objective",
    "kernel_threads": "objective",
    "SERIAL_SAMPLES": "objective",
    "gauss_newton_sums": "jacobian",
    "sum_of_squares": "jacobian",
    "jacobian_matrix": "jacobian",
    "KernelPasses": "passes",
    "damped_step": "lm_step",
    "LMWorkspace": "lm_step",
    "free_set": "lm_step",
    "numba_threads": "threads",
    "set_numba_threads": "threads",
    "single_thread_blas": "threads",
    "phi": "activations",
    "activation_values": "activations",
    "collector_paused": "target",
    "layer_offsets": "layer",
    "layer_values": "layer",
    "layer_jacobian": "layer",
    "layer_sums": "layer",
    "layer_heads": "layer",
    "layer_chunks": "layer",
    "LayerPasses": "layer",
}

__getattr__, __dir__, __all__ = attach(__name__, _LAZY)
