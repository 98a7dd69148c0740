"""Module paths of release 0.1.0, kept importable until 0.4.0 with a ``DeprecationWarning``.

``hmoe_estim.voronoi``, ``hmoe_estim.estimator``, ``hmoe_estim.config`` … were flat modules;
they now live in subpackages (``hmoe_estim.metrics``, ``hmoe_estim.estimators``,
``hmoe_estim.study`` …). A finder on ``sys.meta_path`` answers an import of an old path with the
module that holds its code now, so user code and estimators pickled by 0.1.0 keep working, and
warns once per path and process (the import cache answers the later imports): the warning
names the subpackage to import from instead. ``hmoe_estim.datasets``, ``hmoe_estim.attention``
and ``hmoe_estim.study`` were modules of 0.1.0 too; they are the subpackages themselves and do
not warn. New code imports from the subpackages.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: The release that removes the old paths.
REMOVED_IN = "0.4.0"

#: old module path of release 0.1.0 -> the module that holds its code now
MOVED_MODULES = {
    "hmoe_estim.measure": "hmoe_estim.model._measure",
    "hmoe_estim.parameters": "hmoe_estim.model._parameters",
    "hmoe_estim.regression": "hmoe_estim.model._regression",
    "hmoe_estim.initialization": "hmoe_estim.model._starts",
    "hmoe_estim.estimator": "hmoe_estim.estimators._regressor",
    "hmoe_estim.optim": "hmoe_estim.solvers._lbfgsb",
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
}


#: old path -> {old name: its name in the subpackage} where a name changed
RENAMED = {
    "hmoe_estim.optim": {"StartResult": "SolveResult", "run_starts": "LBFGSB"},
}
#: how a renamed name is used now, for the warning
_HOW = {"LBFGSB": "LBFGSB().solve(problem, starts)"}


def public_path(old):
    """The subpackage that exports the public names of the old path ``old``."""
    return ".".join(MOVED_MODULES[old].split(".")[:2])


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
        old = module.__spec__.name
        # the import machinery has just set the module's __spec__ to the old path's spec;
        # give the module back its own, so that it keeps one identity
        module.__spec__ = module.__spec__.loader_state
        # stacklevel 2: the frames of importlib._bootstrap are skipped, so the warning points
        # at the line that imported the old path (or unpickled an object that names it)
        renamed = "".join(f"; {a} is now {_HOW.get(b, b)}"
                          for a, b in RENAMED.get(old, {}).items())
        warnings.warn(
            f"{old} is deprecated and will be removed in {REMOVED_IN}: import from "
            f"{public_path(old)} instead{renamed} (an object pickled under the old path "
            "loads; pickle it again to store the new path)",
            DeprecationWarning,
            stacklevel=2,
        )


def install():
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
