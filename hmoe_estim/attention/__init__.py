"""Multi-head attention and its HMoE form: the direct (gated) attention pass and the exact
conversion of attention weights to a mixing measure (the paper's Section 2)."""

from ._conversion import attention_to_measure, multihead_attention

__all__ = ["multihead_attention", "attention_to_measure"]
