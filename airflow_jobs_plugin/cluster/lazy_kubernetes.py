"""Start the ``airflow-jobs`` command without importing kubernetes_asyncio's generated classes.

``kubernetes_asyncio``'s package ``__init__`` imports its ``client``, whose ``__init__`` imports every
generated API class and every model class (``kubernetes_asyncio/client/__init__.py`` and
``client/models/__init__.py``, 36.1.0: about 1,600 imports). That costs 1.5 s of CPU on a quiet 2-core
machine, most of what a command reading a small namespace takes, while the product uses three names of
it (``ApiClient``, ``Configuration``, ``ApiException``, through ``cluster/kube.py``) and the kubeconfig loader.

:func:`defer_generated_classes` enters the three packages without running their ``__init__``: each is
created from its own import spec, as the import system would create it, and resolves a name when it is
first asked for. A submodule is imported on its own; one of the names above from the module that
defines it; any other name (a model class the client deserializes into, ``__version__``, an API class
code of another library wants) runs the package's real ``__init__`` once, so from then on the package
is the one the library ships. Only the command line defers (``cli.main`` run as a program): a process
that already imported the library, or that hosts other code using it (Airflow's), is left alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

TOP = "kubernetes_asyncio"
PACKAGES = (TOP, f"{TOP}.client", f"{TOP}.client.models")
# The names the product reads off ``kubernetes_asyncio.client``, and the modules defining them.
DEFINED_IN = {
    f"{TOP}.client": {
        "ApiClient": "api_client",
        "Configuration": "configuration",
        "ApiException": "exceptions",
        "ApiValueError": "exceptions",
        "OpenApiException": "exceptions",
    }
}
# Dunder names a package's real __init__ defines; the import system's own (__path__, __spec__, ...)
# are set on the module from its spec.
_PACKAGE_DUNDERS = ("__version__", "__all__", "__project__")


def defer_generated_classes() -> bool:
    """Enter the library's packages without their ``__init__``; False (nothing done) when any is
    already imported or the library is not installed."""
    if any(name in sys.modules for name in PACKAGES):
        return False
    made: list[str] = []
    try:
        for name in PACKAGES:
            # The parent is already in sys.modules (made just before), so finding a child's spec does not
            # run the parent's __init__.
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None or spec.submodule_search_locations is None:
                raise ImportError(name)
            module = importlib.util.module_from_spec(spec)
            module.__getattr__ = _resolver(module, spec)  # type: ignore[method-assign]
            sys.modules[name] = module
            made.append(name)
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, module)
    except ImportError:
        for name in made:
            sys.modules.pop(name, None)
        return False
    return True


def _resolver(module: types.ModuleType, spec: Any):
    state = {"complete": False}

    def complete() -> None:
        """Run the package's real ``__init__`` in it, once."""
        if not state["complete"]:
            state["complete"] = True
            spec.loader.exec_module(module)

    def __getattr__(name: str) -> Any:  # noqa: N807 - the module protocol's name (PEP 562)
        if name.startswith("__") and name not in _PACKAGE_DUNDERS:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        if not state["complete"]:
            where = DEFINED_IN.get(module.__name__, {}).get(name)
            if where is not None:
                value = getattr(importlib.import_module(f"{module.__name__}.{where}"), name)
                setattr(module, name, value)
                return value
            if importlib.util.find_spec(f"{module.__name__}.{name}") is not None:
                return importlib.import_module(f"{module.__name__}.{name}")
            complete()
        try:
            return module.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}") from None

    return __getattr__
