"""Running the controller: `vgpu-operator run`, or in a thread for the tests and the demo."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from dataclasses import dataclass, field

import kopf

from vgpu_operator.controller.app import Controller, Settings
from vgpu_operator.controller.handlers import build_registry, configure_settings
from vgpu_operator.controller.leader import LEADER, LeaderElectionConfig
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runtime import Runtime
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig


async def run_operator(
    runtime: Runtime,
    *,
    ready_flag: asyncio.Event | threading.Event | None = None,
    stop_flag: asyncio.Event | None = None,
) -> int:
    """The process: serve its liveness endpoint, take the Lease when elected, and run Kopf with
    the operator's registry (and so the controller) only while leading; until stopped. 1 if
    this replica lost its lease."""
    if stop_flag is not None:
        runtime.stop_flag = stop_flag

    async def kopf_with_controller() -> None:
        settings = kopf.OperatorSettings()
        configure_settings(settings)
        # Kopf's own stop flag: the process's without election; under election, one per term,
        # so a lost Lease stops Kopf without reading as the process's stop.
        runtime.kopf_stop = runtime.stop_flag if runtime.leader is None else asyncio.Event()
        try:
            await kopf.operator(
                registry=build_registry(runtime),
                settings=settings,
                clusterwide=True,
                standalone=True,
                ready_flag=ready_flag if runtime.leader is None else None,
                stop_flag=runtime.kopf_stop,
            )
        finally:  # also when the Lease is lost and Kopf is cancelled without its clean-up
            await runtime.cleanup()

    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):  # a standby's; Kopf installs its own
            loop.add_signal_handler(sig, runtime.stop_flag.set)
    await runtime.serve_health()
    try:
        if runtime.leader is None:
            # No election: this replica writes at once, so it is the leader (the chart's
            # VGPUOperatorNoLeader alert reads max(vgpu_operator_leader)).
            LEADER.set(1)
            await kopf_with_controller()
        else:
            if ready_flag is not None:
                ready_flag.set()  # running: a standby until it holds the Lease
            await runtime.elect(kopf_with_controller)
    finally:
        await runtime.close()
    return 1 if runtime.lost else 0


@dataclass
class OperatorThread:
    """The operator in a thread with its own event loop (Kopf cancels all tasks in its loop on
    exit, so it must not share the caller's). Used by the tests and the demo."""

    credentials: Credentials
    options: ReconcilerOptions = field(default_factory=ReconcilerOptions)
    config: OperatorConfig = field(default_factory=OperatorConfig)
    volcano: VolcanoOptions = field(default_factory=VolcanoOptions)
    leader: LeaderElectionConfig | None = None
    user_agent: str = "vgpu-operator"
    ready: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    runtime: Runtime | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def controller(self) -> Controller | None:
        """The running controller (None before start-up, or while a standby)."""
        return self.runtime.controller if self.runtime is not None else None

    @property
    def passes(self) -> int:
        """Reconcile passes completed so far (0 until the first one has finished)."""
        return self.controller.reconciler.passes if self.controller is not None else 0

    def start(self, timeout: float = 60.0) -> OperatorThread:
        # Kopf warns that OS signals cannot be handled off the main thread; here that is
        # the point (the caller owns the process and its signals).
        logging.getLogger("kopf._core.reactor.running").setLevel(logging.ERROR)
        settings = Settings(
            credentials=self.credentials,
            options=self.options.for_config(self.config),
            config=self.config,
            volcano=self.volcano,
            user_agent=self.user_agent,
        )
        self.runtime = Runtime(settings, leader=self.leader)
        self._thread = threading.Thread(target=self._main, name="vgpu-operator", daemon=True)
        self._thread.start()
        if not self.ready.wait(timeout):
            raise TimeoutError(f"the operator did not start within {timeout}s: {self.error}")
        return self

    def _main(self) -> None:
        assert self.runtime is not None
        runtime = self.runtime

        async def main() -> None:
            stop_flag = asyncio.Event()
            loop = asyncio.get_running_loop()

            def relay() -> None:
                self._stop.wait()
                loop.call_soon_threadsafe(stop_flag.set)

            threading.Thread(target=relay, daemon=True).start()
            await run_operator(runtime, ready_flag=self.ready, stop_flag=stop_flag)

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
