"""The one lazy-attribute helper: a package lists ``name -> (module, attribute)`` and gets a
module ``__getattr__``/``__dir__`` pair (PEP 562) that imports a module only when one of its names
is first used, so importing a package never imports torch, matplotlib or ipywidgets early.
"""
from __future__ import annotations

import importlib


def lazy_attributes(package: str, table: dict, namespace: dict):
    """Return ``(__getattr__, __dir__)`` for ``package`` (its ``__name__``).

    ``table`` maps a public name to ``(module, attribute)``; a module starting with ``.`` is
    relative to ``package``; ``attribute`` None means the module itself. A resolved value is
    stored in ``namespace`` (the package's ``globals()``) so the lookup runs once per name.
    """
    names = sorted(table)

    def __getattr__(name: str):
        try:
            module_name, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        module = importlib.import_module(module_name, package)
        value = module if attr is None else getattr(module, attr)
        namespace[name] = value
        return value

    def __dir__():
        return list(names)

    return __getattr__, __dir__
