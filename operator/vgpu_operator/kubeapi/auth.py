"""The record of refused credentials, shared by both API clients (`kubeapi.Client` and the node
agent's `kubeapi.lite.LiteClient`); standard library only. Each client exports it as the gauge
`vgpu_operator_api_auth_failing_seconds` through `export`, in its own metrics registry."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from vgpu_operator.kubeapi.errors import ApiError

log = logging.getLogger("vgpu_operator.kubeapi")

AUTH_FAILING_NAME = "vgpu_operator_api_auth_failing_seconds"
AUTH_FAILING_HELP = (
    "How long the apiserver has refused the credentials (401) or the verbs (403) without a "
    "success in between; 0 while requests are accepted"
)


@dataclass
class AuthHealth:
    """Persistent 401/403 answers: logged once a minute with what was refused, exported as
    `vgpu_operator_api_auth_failing_seconds`, and unhealthy (for the liveness probe) once they
    have lasted `bound` seconds with no accepted request in between.

    A 403 on one verb does not mean the process is broken (RBAC may refuse one object), so only
    a refusal that outlasts every success counts: any 2xx resets the clock."""

    bound: float = 300.0
    log_every: float = 60.0
    clock: Callable[[], float] = time.monotonic
    failing_since: float | None = None
    last_refused: str = ""
    # Sets the gauge; the client this record is given to installs its own when None.
    export: Callable[[float], None] | None = None
    _logged_at: float = -float("inf")

    def refused(self, error: ApiError, verb: str) -> None:
        now = self.clock()
        if self.failing_since is None:
            self.failing_since = now
        self.last_refused = f"{verb} {error.path}: {error.status} {error.message}"
        if self.export is not None:
            self.export(now - self.failing_since)
        if now - self._logged_at >= self.log_every:
            self._logged_at = now
            log.error(
                "the apiserver refuses this process's requests (%.0fs so far): %s",
                now - self.failing_since,
                self.last_refused,
            )

    def accepted(self) -> None:
        if self.failing_since is not None:
            log.info("the apiserver accepts this process's requests again")
        self.failing_since = None
        self._logged_at = -float("inf")
        if self.export is not None:
            self.export(0)

    def healthy(self) -> bool:
        return self.failing_since is None or self.clock() - self.failing_since < self.bound

    def problem(self) -> str:
        """What the liveness probe reports while unhealthy."""
        if self.healthy() or self.failing_since is None:
            return ""
        return f"refused for {self.clock() - self.failing_since:.0f}s: {self.last_refused}"
