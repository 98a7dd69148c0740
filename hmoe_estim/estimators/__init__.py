"""scikit-learn estimators of the HMoE models, fit by least squares (the paper's eq. (3))."""

from ._regressor import G1Regressor, G2Regressor, HMoERegressor, MHARegressor

__all__ = ["HMoERegressor", "MHARegressor", "G1Regressor", "G2Regressor"]
