"""The operator configuration `doctor` and `plan` check against, and where it came from.

`--config FILE` names it. Without it, they use the configuration the running operator uses,
read from the cluster: the Helm chart keeps it in one ConfigMap, `<fullname>-config` in the
release's namespace, key `config.yaml`, mounted into the controller as its `--config`
(charts/vgpu-operator/templates/configmap.yaml); `vgpu-dev demo` keeps it in the same ConfigMap.
With no such ConfigMap in the cluster they use the built-in default. Either way they say which
on stderr (`announce`), so stdout stays the report.

The release's namespace and fullname are not known to the command line, so the ConfigMap is
found by what the chart sets on it: the label `app.kubernetes.io/name: vgpu-operator`
(charts/vgpu-operator/templates/_helpers.tpl, `vgpu-operator.labels`) and the key
`config.yaml` (the chart's dashboard ConfigMap has the label too, under another key). One LIST
across namespaces with that label selector finds it whatever the cluster's size. The label, not
the controller Deployment's reference to the ConfigMap: the label is on the ConfigMap itself, and
it is there where the controller runs outside a Deployment (`vgpu-dev demo`, `vgpu-operator run`
on a workstation); the Deployment's reference would take three hops (its `--config` argument, the
volume mount, the volume) and a read of every Deployment in the cluster.

Two such ConfigMaps (two releases) are not guessed between: the command names both and asks for
`--config`. Credentials that may not list ConfigMaps across namespaces get the built-in default,
and the message says why.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.commands import exitcodes
from vgpu_operator.models.config import ConfigError, OperatorConfig, load_config

# What the chart sets on its configuration ConfigMap (charts/vgpu-operator/templates/configmap.yaml)
CHART_LABEL = "app.kubernetes.io/name=vgpu-operator"
CONFIG_KEY = "config.yaml"
CONFIGMAPS = "/api/v1/configmaps"  # every namespace's


@dataclass(frozen=True)
class ConfigSource:
    """An operator configuration and where it came from, as the commands print it."""

    config: OperatorConfig
    where: str


class ConfigLookupError(Exception):
    """The cluster's configuration cannot be used: the message names the ConfigMap and the fix;
    `code` is the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def from_file(path: str) -> ConfigSource:
    """The configuration `--config FILE` names (OSError, ConfigError as `load_config`)."""
    return ConfigSource(load_config(Path(path).read_text()), f"file {path}")


def builtin(why: str) -> ConfigSource:
    return ConfigSource(OperatorConfig(), f"the built-in default ({why})")


def _name(cm: Mapping[str, Any]) -> str:
    meta = cm.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def chosen(configmaps: Iterable[Mapping[str, Any]]) -> ConfigSource:
    """The running operator's configuration among the ConfigMaps the chart's label selects:
    the one with the key `config.yaml`. None: the built-in default; two or more, or one that is
    not a valid configuration: ConfigLookupError naming them and the fix."""
    found = [cm for cm in configmaps if CONFIG_KEY in (cm.get("data") or {})]
    if not found:
        return builtin(
            f"no ConfigMap labelled {CHART_LABEL} with the key {CONFIG_KEY} in any namespace: "
            "the chart's is not installed"
        )
    if len(found) > 1:
        names = ", ".join(sorted(_name(cm) for cm in found))
        raise ConfigLookupError(
            f"{len(found)} operator configurations in the cluster (ConfigMaps {names}, each "
            f"labelled {CHART_LABEL} with the key {CONFIG_KEY}): name the one to check against "
            f"with --config FILE (kubectl get configmap -n NAMESPACE NAME "
            "-o jsonpath='{.data.config\\.yaml}' > FILE)",
            exitcodes.USAGE,
        )
    [cm] = found
    where = f"ConfigMap {_name(cm)}, key {CONFIG_KEY}"
    try:
        config = load_config(str(cm["data"][CONFIG_KEY]))
    except ConfigError as exc:
        raise ConfigLookupError(
            f"the operator configuration in {where} is not valid (the operator does not start "
            f"on it; fix it in the chart's values, `config:`):\n{exc}",
            exitcodes.USAGE,
        ) from None
    return ConfigSource(config, where)


async def running_config(api: client.ApiClient) -> ConfigSource:
    """The configuration the running operator uses, read from the cluster (`chosen`); the
    built-in default when the credentials may not list ConfigMaps, saying so."""
    try:
        listing = await kubeapi.request(
            api, "GET", CONFIGMAPS, query={"labelSelector": CHART_LABEL}
        )
    except (kubeapi.Forbidden, kubeapi.NotFound) as exc:
        return builtin(
            f"the cluster's could not be looked up: listing ConfigMaps in every namespace was "
            f"refused ({exc.status}); give the operator's configuration with --config FILE"
        )
    return chosen(listing.get("items") or [])


def announce(command: str, source: ConfigSource) -> None:
    """Say on stderr which configuration `command` uses (stdout is its report)."""
    print(f"vgpu-operator {command}: operator configuration: {source.where}", file=sys.stderr)
