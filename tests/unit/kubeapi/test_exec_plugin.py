"""Exec credential plugins are bounded in time (kubeapi.exec_plugin): a plugin that hangs (the
review's kc02: `sleep 1000` hung the CLI) fails the load after `exec_timeout` with an error that
names the plugin, and neither it nor what it started is left running. A plugin that answers
behaves as with the library's own provider."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kubernetes_asyncio.config import kube_config

from vgpu_devcluster import kubeconfigs
from vgpu_operator.kubeapi.credentials import Credentials, CredentialsError
from vgpu_operator.kubeapi.exec_plugin import (
    EXEC_TIMEOUT,
    BoundedExecProvider,
    exec_timeout,
    install_bounds,
)

SERVER = "https://127.0.0.1:6443"


def plugin_kubeconfig(tmp_path: Path, script: str, *args: str) -> Path:
    plugin = tmp_path / "plugin.sh"
    plugin.write_text("#!/bin/sh\n" + script)
    plugin.chmod(0o755)
    cluster = kubeconfigs.cluster_entry(SERVER, None)
    return kubeconfigs.write(
        tmp_path / "kubeconfig", kubeconfigs.config(cluster, kubeconfigs.exec_user(plugin, *args))
    )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie not reaped yet still answers signal 0: look at its state
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(") ", 1)[1].startswith("Z")


def wait_gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


async def test_kc02_a_hanging_plugin_fails_after_the_bound_and_is_stopped(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # the plugin starts a child of its own, then hangs (both must go)
    path = plugin_kubeconfig(tmp_path, f'sleep 1000 &\necho $$ $! > "{pids}"\nexec sleep 1000\n')
    creds = Credentials(kubeconfig=str(path), exec_timeout=0.5)
    started = time.monotonic()
    with pytest.raises(CredentialsError, match=r"did not finish within 0.5 s") as err:
        await creds.configuration()
    assert time.monotonic() - started < 5.0
    assert "plugin.sh" in str(err.value) and str(path) in str(err.value)
    for pid in map(int, pids.read_text().split()):
        assert wait_gone(pid), f"process {pid} of the plugin is still running"


async def test_a_plugin_that_answers_in_time_gives_its_token(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("abc")
    plugin = kubeconfigs.write_exec_plugin(tmp_path / "plugin.sh")
    cluster = kubeconfigs.cluster_entry(SERVER, None)
    path = kubeconfigs.write(
        tmp_path / "kubeconfig",
        kubeconfigs.config(cluster, kubeconfigs.exec_user(plugin, str(token))),
    )
    cfg = await Credentials(kubeconfig=str(path), exec_timeout=10).configuration()
    assert cfg.api_key["BearerToken"] == "Bearer abc"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ('echo "no login" >&2\nexit 3\n', "exec: process returned 3. no login"),
        ("echo not json\n", "exec: failed to decode process output"),
        ("echo '[]'\n", "exec: malformed response"),
        (
            'echo \'{"apiVersion": "v0", "kind": "ExecCredential", "status": {}}\'\n',
            "does not match",
        ),
    ],
)
async def test_a_plugin_that_fails_says_why_as_before(
    tmp_path: Path, script: str, message: str
) -> None:
    path = plugin_kubeconfig(tmp_path, script)
    with pytest.raises(CredentialsError, match=message):
        await Credentials(kubeconfig=str(path), exec_timeout=10).configuration()


def test_the_default_and_the_installation() -> None:
    assert EXEC_TIMEOUT == 30.0
    assert Credentials().exec_timeout == EXEC_TIMEOUT
    install_bounds()
    install_bounds()  # idempotent
    assert kube_config.ExecProvider is BoundedExecProvider  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="positive"), exec_timeout(0):
        pass
