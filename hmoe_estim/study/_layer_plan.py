"""What a layer study fits: the true layer, the reference sample of token matrices, and the
plain (JSON) form of a layer's weights.
"""

import functools

import numpy as np

__all__ = ["true_layer", "layer_reference_sample", "layer_to_dict", "layer_from_dict"]

#: Weights of an ``AttentionLayer``, in the order of its fields.
LAYER_FIELDS = ("W_Q", "W_K", "P", "W_V", "W_O", "W_theta", "intercept")


def true_layer(config):
    """The study's true layer: ``hmoe_estim.layer.random_attention_layer`` of
    ``config.truth``."""
    from ..layer import random_attention_layer

    t = config.truth
    return random_attention_layer(t.n_heads, t.d, t.head_dim, t.d_out, qk=t.qk,
                                  gate_form=t.gate_form, granularity=t.granularity,
                                  scale=t.scale, random_state=t.seed)


def truth_source(config):
    """How the truth was made, as a call (for ``truth.json``)."""
    t = config.truth
    return (f"random_attention_layer(n_heads={t.n_heads}, d={t.d}, head_dim={t.head_dim}, "
            f"d_out={t.d_out}, qk={t.qk!r}, gate_form={t.gate_form!r}, "
            f"granularity={t.granularity!r}, scale={t.scale}, random_state={t.seed})")


def layer_to_dict(layer):
    """The weights of ``layer`` as nested lists (absent weights left out)."""
    return {k: getattr(layer, k).tolist() for k in LAYER_FIELDS
            if getattr(layer, k) is not None}


def layer_from_dict(d):
    """The ``AttentionLayer`` of :func:`layer_to_dict`'s output."""
    from ..layer import AttentionLayer

    return AttentionLayer(**{k: np.asarray(v, dtype=np.float64) for k, v in d.items()
                             if k in LAYER_FIELDS})


def same_layer(a, b):
    """Whether two layers have the same weights (up to rounding)."""
    return all(
        (getattr(a, k) is None) == (getattr(b, k) is None)
        and (getattr(a, k) is None or (getattr(a, k).shape == getattr(b, k).shape
                                       and np.allclose(getattr(a, k), getattr(b, k))))
        for k in LAYER_FIELDS
    )


@functools.lru_cache(maxsize=4)
def _reference_tokens(n_ref, n_tokens, d, tokens, seed):
    rng = np.random.default_rng(seed)
    shape = (n_ref, n_tokens, d)
    X = rng.normal(size=shape) if tokens == "normal" else rng.uniform(-1.0, 1.0, size=shape)
    X.setflags(write=False)
    return X


def layer_reference_sample(config):
    """The fixed reference sample of the metrics: ``n_ref`` token matrices of shape
    ``(N, d)`` from the data's token distribution."""
    return _reference_tokens(config.metrics.n_ref, config.data.n_tokens, config.truth.d,
                             config.data.tokens, config.metrics.ref_seed)
