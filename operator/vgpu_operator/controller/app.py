"""Starting the controller: `vgpu-operator run`, or in-process for tests and the demo."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field

import kopf
from prometheus_client import start_http_server

from vgpu_operator.controller.handlers import ControllerState, build_registry, configure_settings
from vgpu_operator.controller.kube import Credentials
from vgpu_operator.controller.reconciler import ReconcilerOptions


async def run_operator(
    state: ControllerState,
    *,
    liveness_endpoint: str | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
    stop_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    settings = kopf.OperatorSettings()
    configure_settings(settings)
    await kopf.operator(
        registry=build_registry(state),
        settings=settings,
        clusterwide=True,
        standalone=True,
        liveness_endpoint=liveness_endpoint,
        ready_flag=ready_flag,
        stop_flag=stop_flag,
    )


def serve_metrics(port: int) -> None:
    start_http_server(port)


@dataclass
class OperatorThread:
    """The operator in a thread with its own event loop (Kopf cancels all tasks in its loop on
    exit, so it must not share the caller's). Used by the tests and the demo."""

    credentials: Credentials
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    ready: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    error: BaseException | None = None
    state: ControllerState = field(init=False)

    def __post_init__(self) -> None:
        self.state = ControllerState(credentials=self.credentials, options=self.options)

    @property
    def passes(self) -> int:
        """Reconcile passes completed so far (0 until the first one has finished)."""
        return self.state.reconciler.passes if self.state.reconciler else 0

    def start(self, timeout: float = 60.0) -> OperatorThread:
        # Kopf warns that OS signals cannot be handled off the main thread; here that is
        # the point (the caller owns the process and its signals).
        logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
        self._thread = threading.Thread(target=self._main, name="vgpu-operator", daemon=True)
        self._thread.start()
        if not self.ready.wait(timeout):
            raise TimeoutError(f"the operator did not start within {timeout}s: {self.error}")
        return self

    def _main(self) -> None:
        async def main() -> None:
            stop_flag = asyncio.Event()
            loop = asyncio.get_running_loop()

            def relay() -> None:
                self._stop.wait()
                loop.call_soon_threadsafe(stop_flag.set)

            threading.Thread(target=relay, daemon=True).start()
            await run_operator(self.state, ready_flag=self.ready, stop_flag=stop_flag)

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the caller through .error
            self.error = exc

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError("the operator did not stop")
