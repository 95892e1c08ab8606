"""A kubelet PodResources server double: the real gRPC API (v1 `PodResourcesLister.List`) over a
unix socket, its messages encoded by classes protoc generates from the pinned api.proto.

tests/data/podresources/api.proto is kubernetes/kubelet@v0.35.4:pkg/apis/podresources/v1/api.proto
(commit e387a1db1b45974dded330f2496c01e48b317f10), copied verbatim; SHA256SUMS beside it pins it.
The classes are generated once per test process (grpc_tools.protoc, a dev dependency) into a
temporary directory: the agent decodes by hand (agent.podresources_wire), the double encodes with
protobuf's own code, so each checks the other.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

# The tests fork subprocesses (the fake nvidia-smi, agents) while the double's threads run; each
# child execs at once, so gRPC's fork handlers (and their "skipping fork() handlers" line) are
# not wanted. Read when gRPC is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import grpc

DATA = Path(__file__).parents[1] / "data" / "podresources"
PROTO = DATA / "api.proto"
SOURCE = "kubernetes/kubelet@v0.35.4:pkg/apis/podresources/v1/api.proto"


def pinned_sha256() -> str:
    line = (DATA / "SHA256SUMS").read_text().split("\n")[0]
    digest, name = line.split()
    assert name == "api.proto"
    return digest


def proto_sha256() -> str:
    return hashlib.sha256(PROTO.read_bytes()).hexdigest()


@functools.cache
def api_pb2() -> ModuleType:
    """The generated `api_pb2` of the pinned proto (its SHA256 checked first)."""
    from grpc_tools import protoc

    assert proto_sha256() == pinned_sha256(), "api.proto differs from its pinned SHA256"
    out = Path(tempfile.mkdtemp(prefix="podresources-pb2-"))
    shutil.copy(PROTO, out / "api.proto")
    rc = protoc.main(["protoc", f"-I{out}", f"--python_out={out}", str(out / "api.proto")])
    assert rc == 0, f"protoc failed ({rc})"
    spec = importlib.util.spec_from_file_location("podresources_v1_api_pb2", out / "api_pb2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Held:
    """One container's devices of one resource, as the kubelet reports them."""

    pod: str
    resource: str
    devices: list[str]
    namespace: str = "default"
    container: str = "main"


def response(held: list[Held], *, dra: Iterable[tuple[str, str, str]] = ()) -> Any:
    """A ListPodResourcesResponse; `dra`: (pod, driver, device) claims in the `default`
    namespace. Unrelated fields (topology, cpu_ids, memory) are set too: the agent skips them."""
    pb = api_pb2()
    pods: dict[tuple[str, str], Any] = {}
    for h in held:
        pod = pods.get((h.namespace, h.pod))
        if pod is None:
            pod = pods[(h.namespace, h.pod)] = pb.PodResources(name=h.pod, namespace=h.namespace)
        box = next((c for c in pod.containers if c.name == h.container), None)
        if box is None:
            box = pod.containers.add(name=h.container, cpu_ids=[2, 3])
            box.memory.add(memory_type="memory", size=1 << 30)
        dev = box.devices.add(resource_name=h.resource, device_ids=h.devices)
        dev.topology.nodes.add(ID=0)
    for name, driver, device in dra:
        pod = pods.setdefault(("default", name), pb.PodResources(name=name, namespace="default"))
        box = pod.containers.add(name="main")
        claim = box.dynamic_resources.add(claim_name=f"{name}-gpu", claim_namespace="default")
        res = claim.claim_resources.add(driver_name=driver, pool_name="node-0", device_name=device)
        res.cdi_devices.add(name=f"k8s.{driver}/gpu={device}")
    return pb.ListPodResourcesResponse(pod_resources=list(pods.values()))


@dataclass
class PodResourcesDouble:
    """`List` answers from `held` (and `dra`); `fail` makes it answer that status instead."""

    socket: str
    held: list[Held] = field(default_factory=list)
    dra: list[tuple[str, str, str]] = field(default_factory=list)
    fail: grpc.StatusCode | None = None
    calls: int = 0
    server: grpc.Server | None = None

    def start(self) -> PodResourcesDouble:
        pb = api_pb2()

        def list_(_request: Any, context: grpc.ServicerContext) -> Any:
            self.calls += 1
            if self.fail is not None:
                context.abort(self.fail, "the double was told to fail")
            return response(self.held, dra=self.dra)

        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    list_,
                    request_deserializer=pb.ListPodResourcesRequest.FromString,
                    response_serializer=pb.ListPodResourcesResponse.SerializeToString,
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        assert self.server.add_insecure_port(f"unix:{self.socket}") == 1
        self.server.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=None).wait(5)
            self.server = None


def socket_path() -> str:
    """A short path for a unix socket (sun_path holds 107 bytes; pytest's tmp_path may not)."""
    return str(Path(tempfile.mkdtemp(prefix="pr-")) / "kubelet.sock")
