"""Module paths of releases before the package was laid out by concern, kept importable.

``hmoe_estim.voronoi``, ``hmoe_estim.estimator``, ``hmoe_estim.config`` … were flat modules;
they now live in subpackages (``hmoe_estim.metrics``, ``hmoe_estim.estimators``,
``hmoe_estim.study`` …). A finder on ``sys.meta_path`` answers an import of an old path with the
module that holds its code now, so user code and estimators pickled by an earlier release keep
working. New code imports from the subpackages.
"""

import importlib
import importlib.abc
import importlib.util
import sys

#: old module path -> the module that holds its code now
MOVED_MODULES = {
    "hmoe_estim.measure": "hmoe_estim.model._measure",
    "hmoe_estim.parameters": "hmoe_estim.model._parameters",
    "hmoe_estim.regression": "hmoe_estim.model._regression",
    "hmoe_estim.initialization": "hmoe_estim.model._starts",
    "hmoe_estim.estimator": "hmoe_estim.estimators._regressor",
    "hmoe_estim.optim": "hmoe_estim.solvers._multistart",
    "hmoe_estim.branches": "hmoe_estim.metrics._branches",
    "hmoe_estim.voronoi": "hmoe_estim.metrics._voronoi",
    "hmoe_estim.expert_metrics": "hmoe_estim.metrics._expert",
    "hmoe_estim.scorers": "hmoe_estim.metrics._scorers",
    "hmoe_estim.config": "hmoe_estim.study._config",
    "hmoe_estim.results": "hmoe_estim.study._results",
    "hmoe_estim.rates": "hmoe_estim.study._rates",
    "hmoe_estim.plotting": "hmoe_estim.study._plotting",
    "hmoe_estim.progress": "hmoe_estim.study._progress",
    "hmoe_estim.cli": "hmoe_estim.study._cli",
    # the name the identifiability diagnosis was first announced under
    "hmoe_estim.identifiability": "hmoe_estim.metrics._identifiability",
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import an old module path as the module that now holds its code (same object)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED_MODULES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(MOVED_MODULES[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import machinery has just set the module's __spec__ to the old path's spec;
        # give the module back its own, so that it keeps one identity
        module.__spec__ = module.__spec__.loader_state


def install():
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
