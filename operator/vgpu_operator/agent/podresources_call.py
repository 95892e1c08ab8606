"""One call of the kubelet's PodResources `List`, in a process of its own (agent.kubelet runs it).

    python -m vgpu_operator.agent.podresources_call SOCKET TIMEOUT

writes the raw ListPodResourcesResponse bytes to stdout and exits 0; on any error it writes the
gRPC status (or the error) to stderr and exits 1. The agent decodes the bytes itself
(agent.podresources_wire). gRPC lives only here: importing it costs a process about 26 MiB of
resident memory, which the idle agent does not pay; this process ends after the one call.

The channel is the one the kubelet's own client opens: a unix socket, no TLS, a receive limit
(kubernetes/kubernetes@21cd2f2472c2:pkg/kubelet/apis/podresources/client.go `GetV1Client`), here
16 MiB, the kubelet's node e2e tests' `defaultPodResourcesMaxSize` (test/e2e_node/util.go, as
https://github.com/kubernetes/kubernetes/blob/82baa26905c94398a0d19e1b1ecf54eb8acb6029/test/e2e_node/util.go
has it) and a 10 s call timeout there (`defaultPodResourcesTimeout`).
"""

from __future__ import annotations

import os
import sys

from vgpu_operator.agent.podresources_wire import METHOD

MAX_MESSAGE = 16 * 1024 * 1024


def call(socket: str, timeout: float) -> bytes:
    import grpc  # here only: see the module's docstring

    options = [("grpc.max_receive_message_length", MAX_MESSAGE)]
    with grpc.insecure_channel(f"unix:{socket}", options=options) as channel:
        rpc = channel.unary_unary(
            METHOD,
            request_serializer=lambda request: request,  # ListPodResourcesRequest {}: no bytes
            response_deserializer=lambda raw: raw,
        )
        answer: bytes = rpc(b"", timeout=timeout, wait_for_ready=False)
        return answer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: podresources_call SOCKET TIMEOUT", file=sys.stderr)
        return 2
    if not os.path.exists(args[0]):
        print(f"no kubelet PodResources socket at {args[0]}", file=sys.stderr)
        return 1
    try:
        answer = call(args[0], float(args[1]))
    except Exception as e:  # grpc.RpcError included: its code and details
        code = getattr(e, "code", None)
        details = getattr(e, "details", None)
        if callable(code) and callable(details):
            print(f"{code()}: {details()}", file=sys.stderr)
        else:
            print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(answer)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
