"""The consistency rules in a worker process that is killed at a deadline.

The rules are pure functions of a snapshot of what the cluster holds, and much of it is written
by whoever may edit a ConfigMap or annotate a Node. Whatever a rule trips over, it must not stall
the controller: here the rules run in a separate process, one after the other, each within
`rule_deadline` seconds and all of them within `pass_budget`. A rule that does not finish in time
is stopped by killing the process (a thread cannot be stopped) and becomes an error finding; the
rules after it run in a new worker. The event loop only waits for the answers, in a thread: node
writes, the other reconciler and the liveness endpoint go on meanwhile.

`run_rules(snapshot)` is the drop-in for `core.rules.run_rules` in the shell (the configuration
reconciler, `doctor`): same arguments, same `RuleResults`. One worker serves the process (a lock
orders the callers); it is a fresh interpreter (`python -m vgpu_operator.controller.rules_process`:
a fork of a process running threads may inherit a held lock, and multiprocessing's spawn would
run the caller's main module again) speaking pickles over two pipes, and keeps running between
passes, so only the first pass and the one after a kill pay for its start. Its module
(`controller.rules_process`) imports the rules and none of this one's asyncio and subprocess:
the worker holds only what the rules need.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from vgpu_operator.controller import rules_process
from vgpu_operator.controller.rules_process import MODULES, Duplex
from vgpu_operator.core.rules.base import (
    RULES,
    SEVERITY_ORDER,
    Finding,
    Rule,
    RuleResults,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot

log = logging.getLogger("vgpu_operator.rules")

RULE_DEADLINE = 10.0  # seconds one rule may take
PASS_BUDGET = 30.0  # seconds all rules of one pass may take together
_POLL = 0.25  # the waiting thread looks at `closing` this often
WORKER_MAIN = rules_process.__name__  # the module the worker runs (`python -m`)


def _not_here(snapshot: ClusterSnapshot) -> Iterable[Any]:
    """The check of a rule only the worker has (one a test registered there)."""
    del snapshot
    return ()


def _stopped(rule_id: str, why: str) -> Finding:
    return Finding(
        id=rule_id,
        severity="error",
        objects=(),
        message=f"the rule was stopped: {why}; its findings are unknown in this pass",
        fix=f"run `vgpu-operator doctor --rule {rule_id}` to see the objects involved, and "
        "report this as a bug in vgpu-operator with them",
    )


class RulesWorker:
    """One worker process and the protocol above. `run` blocks; it is thread-safe."""

    def __init__(
        self,
        rule_deadline: float = RULE_DEADLINE,
        pass_budget: float = PASS_BUDGET,
        modules: Sequence[str] = MODULES,
    ) -> None:
        self.rule_deadline = rule_deadline
        self.pass_budget = pass_budget
        self.modules = tuple(modules)
        self.kills = 0  # workers killed at a deadline (or found dead) so far
        self.closing = False
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Duplex | None = None
        self._lock = threading.Lock()

    # -- the process ------------------------------------------------------------------------
    def _start(self) -> Duplex:
        if self._conn is not None and self._process is not None and self._process.poll() is None:
            return self._conn
        self._stop_process()
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    WORKER_MAIN,
                    str(to_child),
                    str(from_child),
                    *self.modules,
                ],
                pass_fds=(to_child, from_child),
                stdin=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        finally:
            os.close(to_child)
            os.close(from_child)
        self._process = process
        self._conn = Duplex.of(to_parent, from_parent)
        return self._conn

    def _stop_process(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.poll() is None:
                process.kill()
            try:
                process.wait(5.0)
            except subprocess.TimeoutExpired:
                log.error("the rules' worker %d did not end after SIGKILL", process.pid)

    def start(self) -> None:
        """Start the process now rather than at the first pass: its imports then run while the
        caller reads what it will check (`doctor`)."""
        with self._lock:
            self._start()

    def close(self) -> None:
        self.closing = True
        with self._lock:
            self._stop_process()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # -- one pass ---------------------------------------------------------------------------
    def _wait(self, conn: Duplex, seconds: float) -> bool:
        """Whether an answer came within `seconds` (False also when closing)."""
        end = time.monotonic() + seconds
        while not self.closing:
            left = end - time.monotonic()
            if left <= 0:
                return False
            if conn.poll(min(left, _POLL)):
                return True
        return False

    def run(self, snapshot: ClusterSnapshot, only: Iterable[str] | None = None) -> RuleResults:
        wanted = None if only is None else sorted(set(only))
        with self._lock:
            return self._run(snapshot, wanted)

    def _run(self, snapshot: ClusterSnapshot, only: list[str] | None) -> RuleResults:
        budget_end = time.monotonic() + self.pass_budget
        rules: list[Rule] | None = None
        findings: list[Finding] = []
        pending: list[str] | None = None  # rule ids still to run (None: not known yet)
        while pending is None or pending:
            try:
                conn = self._start()
                conn.send((snapshot, only if pending is None else pending))
                if not self._wait(conn, max(0.0, budget_end - time.monotonic()) + 5.0):
                    raise TimeoutError("the worker did not answer")
                _kind, listed = conn.recv()
            except Exception as exc:  # cannot start, cannot send the snapshot, died at once
                self._stop_process()
                self.kills += 1
                log.error("the rules' worker failed: %s: %s", type(exc).__name__, exc)
                ids = pending if pending is not None else sorted(only or RULES)
                findings += [_stopped(i, f"its worker process failed ({exc})") for i in ids]
                rules = rules or [RULES.get(i) or Rule(i, i, _not_here) for i in ids]
                break
            if pending is None:
                rules = [RULES.get(i) or Rule(i, title, _not_here) for i, title in listed]
                pending = [i for i, _ in listed]
            while pending:
                rule_id = pending[0]
                left = budget_end - time.monotonic()
                if left <= 0:
                    findings += [
                        _stopped(i, f"the rules of one pass may take {self.pass_budget:g} s")
                        for i in pending
                    ]
                    self._kill(f"the pass budget of {self.pass_budget:g} s ran out")
                    pending = []
                    break
                limit = min(self.rule_deadline, left)
                answered = self._wait(conn, limit)
                try:
                    got_id, got = conn.recv() if answered else (None, None)
                except (EOFError, OSError):
                    got_id, got = None, None
                if got_id != rule_id:
                    why = (
                        f"it did not finish within {limit:g} s"
                        if not answered
                        else "its worker process ended"
                    )
                    findings.append(_stopped(rule_id, why))
                    self._kill(f"rule {rule_id}: {why}")
                    pending.pop(0)
                    break  # the rest in a new worker
                findings += got or []
                pending.pop(0)
        findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.id, [str(o) for o in f.objects]))
        return RuleResults(rules=rules or [], findings=findings)

    def _kill(self, why: str) -> None:
        self.kills += 1
        log.error("stopping the rules' worker: %s", why)
        self._stop_process()


_shared: RulesWorker | None = None
_shared_lock = threading.Lock()


def shared() -> RulesWorker:
    """The process's worker (started on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RulesWorker()
        return _shared


async def run_rules(snapshot: ClusterSnapshot, only: Iterable[str] | None = None) -> RuleResults:
    """`core.rules.run_rules`, in the worker process, waited for off the event loop."""
    return await asyncio.to_thread(shared().run, snapshot, only)
