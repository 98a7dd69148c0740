"""Names of a package loaded on first use (PEP 562), so that importing one does not load the
modules of the others (Numba's, in particular)."""

import importlib
import sys

__all__ = ["attach"]


def attach(package, table):
    """``(__getattr__, __dir__, __all__)`` for ``package`` whose public names are the keys of
    ``table`` (name -> module of the package that defines it)."""

    def __getattr__(name):
        if name in table:
            value = getattr(importlib.import_module(f".{table[name]}", package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    names = sorted(table)

    def __dir__():
        return [*names, "__all__"]

    return __getattr__, __dir__, names
