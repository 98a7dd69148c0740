"""Names of the gate positions and activations, and their checks.

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


def check_gate(gate):
    """Return ``gate`` if it names a gate position, else raise a ``ValueError``."""
    if not isinstance(gate, str) or gate not in GATE_CODES:
        raise ValueError(
            f"Unknown gate {gate!r}. Use one of {list(GATES)}: 'none' (plain multi-head "
            "attention, linear experts), 'value' (G2, after the value projection), 'sdpa' "
            "(G1, after the attention output) or 'output' (G5, after the dense output)."
        )
    return gate


def check_activation(activation):
    """Return ``activation`` if it names a supported activation, else raise ``ValueError``."""
    if not isinstance(activation, str) or activation not in ACTIVATION_CODES:
        raise ValueError(
            f"Unknown activation {activation!r}. Use one of {list(ACTIVATIONS)}."
        )
    return activation
