"""Multi-head attention and its HMoE form: the direct (gated) attention pass, the exact
conversion of attention weights to a mixing measure (the paper's Section 2), and the same for
``torch.nn.MultiheadAttention`` modules in both directions (PyTorch is the optional extra
``torch``; it is imported only when a conversion runs)."""

from ._conversion import attention_to_measure, multihead_attention
from ._torch import (
    attention_forward,
    from_torch,
    from_torch_all,
    measure_to_torch,
    to_torch,
    weights_from_torch,
)

__all__ = [
    "multihead_attention",
    "attention_to_measure",
    "from_torch",
    "from_torch_all",
    "to_torch",
    "weights_from_torch",
    "measure_to_torch",
    "attention_forward",
]


def __getattr__(name):
    # the module class of measure_to_torch is built on first use: it subclasses torch.nn.Module
    if name == "HMoEModule":
        from . import _torch

        return _torch.HMoEModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
