"""Every payload the operator reads from the cluster parses, or a finding names where it does
not: the ConfigMap and its key (or annotation), the Node and its annotation.

The other rules read these payloads through loaders that fall back (an unreadable `config.json`
is read as no entries, as the device plugin reads it; an unreadable ownership record as owning
nothing), and the renderers refuse to overwrite what they cannot read (core.volcano.render). This
rule
is where each of those errors is said once, with the object and the key: YAML that does not
parse, aliases (refused before anything is expanded, yamlsafe), integers beyond 64 bits,
a mapping that is not one, a JSON annotation that does not match its model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from pydantic import ValidationError

from vgpu_operator import contract, yamlsafe
from vgpu_operator.core.nodes.facts import node_facts
from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, rule, warning
from vgpu_operator.core.volcano.render.common import RenderError, RoundTrip
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot, annotations_of, name_of
from vgpu_operator.core.volcano.times import parse_time
from vgpu_operator.models.inventory import Inventory
from vgpu_operator.models.node import NodeConfig
from vgpu_operator.models.volcano import (
    DEFAULT_DEVICE_CONFIG_NAME,
    DEVICE_CONFIG_KEY,
    PLUGIN_CM_NAMESPACES,
    PayloadError,
    load_yaml_mapping,
    parse_ascend_node_config,
    parse_device_config,
    parse_node_config,
)

Loader = Callable[[str], Any]


def _yaml_mapping(what: str) -> Loader:
    return lambda text: load_yaml_mapping(text, what)


def _payloads(s: ClusterSnapshot) -> dict[tuple[str, str, str], Loader]:
    """(namespace, name, key) -> its loader, for every ConfigMap key the operator reads."""
    cfg = s.config
    out: dict[tuple[str, str, str], Loader] = {
        (*cfg.scheduler.config_map.ref(), cfg.scheduler.config_map.key): _yaml_mapping(
            cfg.scheduler.config_map.key
        ),
        (*cfg.device_config.ref(), cfg.device_config.key): parse_device_config,
        (*cfg.node_config.ref(), cfg.node_config.key): parse_node_config,
        (*cfg.ascend_node_config.ref(), cfg.ascend_node_config.key): parse_ascend_node_config,
    }
    for ns in PLUGIN_CM_NAMESPACES:
        out.setdefault((ns, DEFAULT_DEVICE_CONFIG_NAME, DEVICE_CONFIG_KEY), parse_device_config)
    sched = s.scheduler_device_config
    out.setdefault((sched.namespace, sched.name, DEVICE_CONFIG_KEY), parse_device_config)
    if cfg.ascend_vnpu.enabled:
        ref = cfg.ascend_vnpu.scheduler_device
        out.setdefault((*ref.ref(), ref.key), _yaml_mapping(ref.key))
    return out


def _configmap_issues(s: ClusterSnapshot) -> Iterator[Issue]:
    for (namespace, name, key), load in sorted(_payloads(s).items(), key=lambda kv: kv[0]):
        cm = s.configmap(namespace, name)
        text = ((cm or {}).get("data") or {}).get(key)
        if cm is None or not isinstance(text, str):
            continue
        problem = None
        try:
            load(text)
            if not key.endswith(".json"):
                RoundTrip(text)  # what the renderers load it with (comments kept)
        except (PayloadError, RenderError) as exc:
            problem = str(exc)
        if problem is not None:
            yield error(
                cm_ref(namespace, name),
                f"ConfigMap {namespace}/{name}, key {key}: {_one_line(problem)}; the operator "
                "does not change it, and the components may not read it as intended",
                fix=f"correct the key {key} of {namespace}/{name} (kubectl edit configmap -n "
                f"{namespace} {name})",
            )
        annotations = annotations_of(cm)
        stamp = annotations.get(contract.ANN_DATA_CHANGED_AT)
        if stamp is not None and parse_time(stamp) is None:
            yield error(
                cm_ref(namespace, name),
                f"ConfigMap {namespace}/{name}, annotation {contract.ANN_DATA_CHANGED_AT}: "
                f"{_one_line(stamp)!r} is not an RFC 3339 time",
                fix=f"remove the annotation (kubectl annotate configmap -n {namespace} {name} "
                f"{contract.ANN_DATA_CHANGED_AT}-); the operator writes it again",
            )
        entries = annotations.get(contract.ANN_OWNED_ENTRIES)
        if entries is not None:
            try:
                yamlsafe.json_loads(entries)
            except yamlsafe.YamlRefused as exc:
                yield error(
                    cm_ref(namespace, name),
                    f"ConfigMap {namespace}/{name}, annotation {contract.ANN_OWNED_ENTRIES}: "
                    f"{_one_line(str(exc))}; read as owning no entry",
                    fix=f"remove the annotation (kubectl annotate configmap -n {namespace} "
                    f"{name} {contract.ANN_OWNED_ENTRIES}-)",
                )


_NODE_ANNOTATIONS: tuple[tuple[str, Callable[[str], Any]], ...] = (
    (contract.ANN_TARGET, NodeConfig.from_annotation),
    (contract.ANN_CONFIG, NodeConfig.from_annotation),
    (contract.ANN_INVENTORY, Inventory.from_annotation),
)


def _node_issues(s: ClusterSnapshot) -> Iterator[Issue]:
    for node in s.nodes:
        name = name_of(node)
        annotations = annotations_of(node)
        problems: list[tuple[str, str]] = []
        for key, parse in _NODE_ANNOTATIONS:
            text = annotations.get(key)
            if not text:
                continue
            try:
                parse(text)
            except (ValidationError, ValueError) as exc:
                problems.append((key, _one_line(str(exc))))
        facts = node_facts(node)
        owned_error = facts.errors.get(contract.ANN_OWNED)
        if owned_error is not None:
            problems.append((contract.ANN_OWNED, owned_error))
        if facts.disowned:
            # a record naming what the operator may never own: forged, or from an older release
            yield warning(
                ObjectRef(kind="Node", name=name),
                f"Node {name}, annotation {contract.ANN_OWNED}: names what the operator may "
                f"not own ({', '.join(facts.disowned)}); never acted on",
                fix="nothing to do: the entries are dropped from the record at the node's next "
                "write; if nobody should have written them, find who can edit Node annotations",
            )
        for key, problem in problems:
            yield error(
                ObjectRef(kind="Node", name=name),
                f"Node {name}, annotation {key}: {problem}",
                fix=f"remove the annotation (kubectl annotate node {name} {key}-): the operator "
                "or the agent writes it again; nothing is written to the node meanwhile"
                if key == contract.ANN_OWNED
                else f"remove the annotation (kubectl annotate node {name} {key}-): the "
                "operator or the agent writes it again",
            )


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@rule("payload-readable", "every payload the operator reads from the cluster parses")
def check_payloads(s: ClusterSnapshot) -> Iterator[Issue]:
    yield from _configmap_issues(s)
    yield from _node_issues(s)
