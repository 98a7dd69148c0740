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
