"""kubernetes-asyncio's `client` and `client.models` packages, loaded name by name.

`kubernetes_asyncio/client/__init__.py` imports every generated API class and model (about 840
names, 700 modules), and `client/api_client.py` imports `client.models`, whose `__init__` imports
every model again; Kopf imports the package at its own import (kopf/_cogs/helpers/thirdparty.py,
for `V1ObjectMeta`). The operator uses the ApiClient, Configuration, the REST layer and the
exceptions, and a handful of models at most: measured, the eager import is about 30 MiB of the
controller's and each agent's resident memory (94.6 -> 63.6 MiB after importing the controller).

`install()` has two lazy packages put in `sys.modules` when the library is first imported,
before its own `__init__` runs: each
has the real package's directory as its `__path__` (so `kubernetes_asyncio.client.rest` and any
submodule import as usual) and a module `__getattr__` (PEP 562) that imports a name's module on
first use, from the same `from kubernetes_asyncio.client.<module> import <Name>` lines the real
`__init__.py` is made of (read from the installed file, not copied). `client.V1Pod`,
`from kubernetes_asyncio.client import CoreV1Api` and the ApiClient's own
`getattr(kubernetes_asyncio.client.models, klass)` resolve to the real classes. If the library
was imported before `install()` runs, or its layout is not the one read here, nothing is changed
(tests/unit/test_lazy_client.py fails when the library's layout changes underneath).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

PACKAGES = ("kubernetes_asyncio.client", "kubernetes_asyncio.client.models")
_IMPORT = re.compile(r"^from (kubernetes_asyncio\.client[\w.]*) import (\w+)$", re.MULTILINE)


def exported_names(init: Path) -> dict[str, str]:
    """name -> the module it comes from, as a generated `__init__.py` imports them."""
    return {name: module for module, name in _IMPORT.findall(init.read_text())}


class LazyPackage(types.ModuleType):
    """A package whose exported names are imported on first use."""

    def __init__(self, name: str, directory: Path, names: dict[str, str]) -> None:
        super().__init__(name)
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(directory)]
        self.__spec__ = spec
        self.__path__ = [str(directory)]
        self.__package__ = name
        self.__file__ = str(directory / "__init__.py")
        self.__all__ = sorted(names)
        self._lazy_names = names

    def __getattr__(self, attr: str) -> Any:
        source = self.__dict__.get("_lazy_names", {}).get(attr)
        if source is None:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        value = getattr(importlib.import_module(source), attr)
        setattr(self, attr, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted({*self.__dict__, *self._lazy_names})


def install() -> bool:
    """Make both packages lazy once something first imports the library; False (nothing will
    change) if the library is already imported or not installed. The generated `__init__.py`
    files are read then, not here: a process that never imports kubernetes-asyncio (the node
    agent) does not hold their 840 names (about 0.45 MiB). If their layout is not the one read
    here, the library then imports as usual."""
    if any(p in sys.modules for p in ("kubernetes_asyncio", *PACKAGES)):
        return False
    spec = importlib.util.find_spec("kubernetes_asyncio")  # does not import it
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations))) / "client"
    sys.meta_path.insert(0, _OnFirstImport(root))
    return True


class _OnFirstImport:
    """A meta path finder that finds nothing: on the first import of the library (before its
    `__init__` runs) it puts the lazy packages in `sys.modules` and leaves the path."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.split(".", 1)[0] == "kubernetes_asyncio":
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            _make_lazy(self.root)


def _make_lazy(root: Path) -> None:
    if any(p in sys.modules for p in PACKAGES):
        return
    packages: dict[str, LazyPackage] = {}
    for name, directory in zip(PACKAGES, (root, root / "models"), strict=True):
        init = directory / "__init__.py"
        names = exported_names(init) if init.is_file() else {}
        if not names:
            return
        packages[name] = LazyPackage(name, directory, names)
    sys.modules.update(packages)
