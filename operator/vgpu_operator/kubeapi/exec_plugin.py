"""Exec credential plugins, bounded in time.

kubernetes-asyncio's `ExecProvider` (36.1.0, kubernetes_asyncio/config/exec_provider.py) waits
for the plugin with no timeout: a plugin that hangs (a login waiting for a browser, a helper
stuck on the network) hangs every command that loads the kubeconfig, and cancelling the wait
leaves the plugin running. `BoundedExecProvider` is the library's provider with one difference:
the plugin runs in a session of its own and gets `exec_timeout` seconds (30 by default), after
which it and every process it started are killed and the load fails with an error that names
the plugin and the wait. What goes in (`KUBERNETES_EXEC_INFO`, the environment, the arguments)
and what is accepted back (an `ExecCredential` of the same apiVersion with a `status`) are the
library's.

The library's kubeconfig loader looks the provider up by name in its module when it runs a
plugin (`KubeConfigLoader.load_from_exec_plugin`); `install_bounds` points that name at this
class, and `exec_timeout` sets the bound for the loads made inside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.exec_provider import ExecProvider

EXEC_TIMEOUT = 30.0  # seconds an exec credential plugin may take

_TIMEOUT: ContextVar[float] = ContextVar("vgpu_exec_plugin_timeout", default=EXEC_TIMEOUT)


class BoundedExecProvider(ExecProvider):
    """The library's exec provider, the plugin bounded in time (see the module docstring)."""

    async def run(self, previous_response: str | None = None) -> Any:
        timeout = _TIMEOUT.get()
        info: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": sys.stdout.isatty()},
        }
        if previous_response:
            info["spec"]["response"] = previous_response
        env = {**self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)}
        proc = await asyncio.create_subprocess_exec(
            *self.args,
            env=env,
            stdin=None,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: whatever it starts goes with it
        )
        try:
            stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            await _stop(proc)
            raise ConfigException(
                f"exec: the credential plugin {self.args[0]} did not finish within "
                f"{timeout:g} s and was stopped (run it by hand to see what it waits for)"
            ) from None
        except BaseException:  # cancelled: the plugin does not outlive the wait
            await _stop(proc)
            raise
        if proc.returncode != 0:
            msg = f"exec: process returned {proc.returncode}"
            if stderr.strip():
                msg += f". {stderr.strip().decode(errors='replace')}"
            raise ConfigException(msg)
        return _status(stdout, str(self.api_version))


def _status(stdout: bytes, api_version: str) -> Any:
    """The `status` of the plugin's ExecCredential, checked as the library checks it."""
    try:
        data = json.loads(stdout)
    except ValueError as exc:
        raise ConfigException(f"exec: failed to decode process output: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigException("exec: malformed response. not an ExecCredential object")
    for key in ("apiVersion", "kind", "status"):
        if key not in data:
            raise ConfigException(f"exec: malformed response. missing key '{key}'")
    if data["apiVersion"] != api_version:
        raise ConfigException(
            f"exec: plugin api version {data['apiVersion']} does not match {api_version}"
        )
    return data["status"]


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Kill the plugin's process group (it leads it: `start_new_session`) and reap it."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


def install_bounds() -> None:
    """Make the library's kubeconfig loader run plugins through `BoundedExecProvider`."""
    current = getattr(kube_config, "ExecProvider", None)
    if current is BoundedExecProvider:
        return
    if current is not ExecProvider:
        raise RuntimeError("kubernetes-asyncio's kube_config changed: review install_bounds")
    kube_config.ExecProvider = BoundedExecProvider  # type: ignore[attr-defined]


@contextlib.contextmanager
def exec_timeout(seconds: float) -> Iterator[None]:
    """Loads inside the block give an exec plugin at most `seconds`."""
    if not seconds > 0:
        raise ValueError("the exec plugin timeout must be a positive number of seconds")
    token = _TIMEOUT.set(seconds)
    try:
        yield
    finally:
        _TIMEOUT.reset(token)
