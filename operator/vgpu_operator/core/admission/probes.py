"""The dry runs of the admission check (core.admission.verdict): requests the chart's
admission policies must refuse, which the controller sends as itself with `dryRun=All`, and how
the apiserver's answer to one is read. An admission refusal and an RBAC one are both 403; the
message tells them apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vgpu_operator.models.config import OperatorConfig

# The probes' targets: a pod that is not there (the eviction needs none, below) and a
# ServiceAccount name no plugin runs as.
PROBE_POD = "vgpu-operator-admission-probe"
PROBE_ACCOUNT = "vgpu-operator-admission-probe"

# refused: an admission policy of the configuration refused it (what must happen);
# admitted: admission let it through; absent: its target does not exist (no conclusion);
# forbidden: RBAC refused it before admission; failed: any other answer, or none.
Outcome = Literal["refused", "admitted", "absent", "forbidden", "failed"]


@dataclass(frozen=True)
class Probe:
    """A request the policies must refuse, sent with `dryRun=All`. `missing` is what a 404
    means for it: whether the apiserver looks the target up before admission ("absent": no
    conclusion) or after ("admitted": admission let it through)."""

    what: str  # in words, for the message
    method: str
    path: str
    body: Mapping[str, Any]
    content_type: str
    missing: Outcome


def probes(config: OperatorConfig) -> list[Probe]:
    """The dry runs the controller sends as itself.

    1. An eviction in kube-system (vgpu-operator-objects refuses every one). RBAC grants the
       controller `pods/eviction` in every namespace (it cannot leave one out), so only
       admission refuses it; and the apiserver runs admission on an Eviction before it looks
       the pod up (kubernetes/kubernetes@v1.35.4:pkg/registry/core/pod/storage/eviction.go,
       `createValidation` before `r.store.Get`), so the probe names a pod that does not exist:
       even a dry run the apiserver ignored would evict nothing, and a 404 means admission let
       it through.
    2. A change of the HAMi plugin DaemonSet's pod ServiceAccount (vgpu-operator-workloads
       refuses it): RBAC grants `patch` on that DaemonSet by name. A PATCH reads the object
       before admission, so a 404 (no plugin installed) says nothing."""
    out = [
        Probe(
            what=f"evict pod kube-system/{PROBE_POD}",
            method="POST",
            path=f"/api/v1/namespaces/kube-system/pods/{PROBE_POD}/eviction",
            body={
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": PROBE_POD, "namespace": "kube-system"},
                "deleteOptions": {"dryRun": ["All"]},
            },
            content_type="application/json",
            missing="admitted",
        )
    ]
    plugin = config.device_plugin
    if "auto" not in (plugin.namespace, plugin.name):
        where = f"{plugin.namespace}/{plugin.name}"
        out.append(
            Probe(
                what=f"set the pod ServiceAccount of DaemonSet {where} to {PROBE_ACCOUNT}",
                method="PATCH",
                path=f"/apis/apps/v1/namespaces/{plugin.namespace}/daemonsets/{plugin.name}",
                body={"spec": {"template": {"spec": {"serviceAccountName": PROBE_ACCOUNT}}}},
                content_type="application/merge-patch+json",
                missing="absent",
            )
        )
    return out


@dataclass(frozen=True)
class ProbeResult:
    probe: Probe
    outcome: Outcome
    detail: str  # the apiserver's message, or why there is none


def probe_result(probe: Probe, status: int, message: str, names: Sequence[str]) -> ProbeResult:
    """What the apiserver's answer (`status` 0: none) to `probe` says. A refusal by admission
    and one by RBAC are both 403 Forbidden (the chart's validations give `reason: Forbidden`;
    another reason gives another code); the apiserver's message tells them apart: the
    admission plugin's names the first policy that denied ("ValidatingAdmissionPolicy 'NAME'
    with binding 'NAME' denied request: ...", kubernetes/kubernetes@v1.35.4:
    staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go), RBAC's
    says "cannot <verb> resource"."""
    if 200 <= status < 300:
        return ProbeResult(probe, "admitted", "accepted (dry run)")
    if 400 <= status < 500 and any(f"ValidatingAdmissionPolicy '{n}'" in message for n in names):
        return ProbeResult(probe, "refused", message)
    if status == 403:
        if "ValidatingAdmissionPolicy" in message or "admission webhook" in message:
            return ProbeResult(probe, "failed", f"refused by another admission check: {message}")
        return ProbeResult(probe, "forbidden", message)
    if status == 404:
        return ProbeResult(probe, probe.missing, message or "404 Not Found")
    return ProbeResult(probe, "failed", f"{status}: {message}" if status else message)
