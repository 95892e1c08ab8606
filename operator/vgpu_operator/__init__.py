"""vgpu-operator: declarative, consistency-checked GPU virtualization for Volcano."""

from importlib.metadata import PackageNotFoundError, version

from vgpu_operator import lazy_client

lazy_client.install()  # before Kopf or any module here imports kubernetes_asyncio

try:
    __version__ = version("vgpu-operator")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
