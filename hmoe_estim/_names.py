"""Names of the gate positions and activations (their checks: ``hmoe_estim/_validation.py``).

Gate positions follow the gated-attention literature (paper eq. (2), (9), (12)):

========== ======== ==============================================================
``gate``   paper    regression function
========== ======== ==============================================================
``"none"`` MHA      ``Σ_h Σ_k ω[h,k] Σ_i g[h,i](x) · (a[h,i,k]·x)``  (eq. (2))
``"value"`` G2      ``Σ_h Σ_k ω[h,k] Σ_i g[h,i](x) · φ(a[h,i,k]·x)``  (eq. (9))
``"sdpa"`` G1       ``Σ_h Σ_k ω[h,k] · φ(Σ_i g[h,i](x) · (a[h,i,k]·x))``  (eq. (12))
``"output"`` G5     ``φ(f_MHA(x))``  (beyond the paper, for comparison)
========== ======== ==============================================================
"""

GATES = ("none", "value", "sdpa", "output")
#: Integer codes used by the Numba kernels (a branch on an int is cheap and cacheable).
GATE_CODES = {name: code for code, name in enumerate(GATES)}
#: Paper labels of the gate positions.
GATE_LABELS = {"none": "MHA", "value": "G2", "sdpa": "G1", "output": "G5"}

ACTIVATIONS = ("sigmoid", "tanh", "gelu", "silu")
ACTIVATION_CODES = {name: code for code, name in enumerate(ACTIVATIONS)}
#: Activations with ``φ(−z) = −φ(z)``: a channel and its sign flip ``(ω, a) → (−ω, −a)`` give
#: the same G1 and G2 function.
ODD_ACTIVATIONS = ("tanh",)

#: Gate positions of a whole attention layer (``hmoe_estim.layer``): the four above, and the
#: gates after the key projection (G3) and after the query projection (G4), whose scores are
#: not quadratic forms in the tokens (no per-entry HMoE). Codes of the layer kernel.
LAYER_GATES = GATES + ("key", "query")
LAYER_GATE_CODES = {name: code for code, name in enumerate(LAYER_GATES)}
LAYER_GATE_LABELS = {**GATE_LABELS, "key": "G3", "query": "G4"}
#: How a gate acts: ``φ`` on the signal (the paper), or a multiplicative gate ``φ(x W_θ)``
#: with parameters of its own (Qiu et al. 2025, at the SDPA output).
GATE_FORMS = ("activation", "multiplicative")
GRANULARITIES = ("headwise", "elementwise")
QK_FORMS = ("factored", "full")
ROWS = ("all", "last")
