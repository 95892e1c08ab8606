"""`vgpu_operator.lazy_client`: kubernetes-asyncio's generated packages load name by name, and
every name resolves to what the eager package gives. Each check runs in a fresh interpreter (the
test process may have imported the library already)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

LOADED = """
import json, sys
import vgpu_operator.controller.app, vgpu_operator.agent.cli, kopf
from kubernetes_asyncio import client
lazy = type(sys.modules["kubernetes_asyncio.client"]).__name__
loaded = sum(1 for m in sys.modules if m.startswith("kubernetes_asyncio.client.models."))
apis = sum(1 for m in sys.modules if m.startswith("kubernetes_asyncio.client.api."))
"""

LAZY = (
    LOADED
    + """
names = {n: f"{getattr(client, n).__module__}.{getattr(client, n).__qualname__}"
         for n in client.__all__}
models = sys.modules["kubernetes_asyncio.client.models"]
model_names = {n: f"{getattr(models, n).__module__}.{getattr(models, n).__qualname__}"
               for n in models.__all__}
print(json.dumps({"lazy": lazy, "loaded": loaded, "apis": apis, "names": names,
                  "models": model_names}))
"""
)

EAGER = """
import json, sys, importlib
client = importlib.import_module("kubernetes_asyncio.client")
models = importlib.import_module("kubernetes_asyncio.client.models")
def public(m):
    return {n: f"{v.__module__}.{v.__qualname__}" for n, v in vars(m).items()
            if isinstance(v, type) and v.__module__.startswith("kubernetes_asyncio.client.")}
print(json.dumps({"names": public(client), "models": public(models)}))
"""


def _run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return result


def test_the_operator_imports_no_generated_model_or_api_it_does_not_use() -> None:
    lazy = _run(
        LAZY.split("names =")[0]
        + 'print(json.dumps({"lazy": lazy, "loaded": loaded, "apis": apis}))'
    )
    assert lazy["lazy"] == "LazyPackage"
    # kopf asks for V1ObjectMeta and V1OwnerReference; of 700 models that is all
    assert isinstance(lazy["loaded"], int) and lazy["loaded"] <= 5, lazy
    assert lazy["apis"] == 0, lazy


def test_every_name_resolves_to_the_class_the_eager_package_exports() -> None:
    lazy, eager = _run(LAZY), _run(EAGER)
    assert isinstance(eager["names"], dict) and len(eager["names"]) > 500  # the library's layout
    assert lazy["names"] == {n: v for n, v in eager["names"].items() if n in lazy["names"]}
    assert set(eager["names"]) <= set(lazy["names"])  # no class of the package is missing
    assert isinstance(eager["models"], dict) and len(eager["models"]) > 500
    assert set(eager["models"]) <= set(lazy["models"])
    assert lazy["models"] == {n: v for n, v in eager["models"].items() if n in lazy["models"]}
