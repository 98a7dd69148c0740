"""scikit-learn estimators of the HMoE models, fit by least squares (the paper's eq. (3)), and
the warning they give after a fit that is worse than predicting the mean."""

# for the study configuration and the layer fit (not public API): the memory check of a
# fit and the scaling of the data by powers of two
from ._guards import MAX_FIT_BYTES as MAX_FIT_BYTES
from ._guards import fit_memory_bytes as fit_memory_bytes
from ._guards import input_scale as input_scale
from ._guards import target_scale as target_scale
from ._regressor import G1Regressor, G2Regressor, HMoERegressor, MHARegressor
from ._warnings import PoorFitWarning

__all__ = ["HMoERegressor", "MHARegressor", "G1Regressor", "G2Regressor", "PoorFitWarning"]
