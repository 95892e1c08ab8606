"""The rules worker's own process: `python -m vgpu_operator.controller.rules_process READ_FD
WRITE_FD [MODULE ...]`, started by `controller.rules_worker`, which owns the protocol's other
end, the deadlines and the kills.

It imports the rules (`MODULES`: importing them registers them) and what they read, and nothing
of the controller's shell: no asyncio, no API client, no Kopf, no metrics. The process lives
beside the controller for as long as the controller runs, so every module it imports is
resident twice (bench/process_floor.py measures both import sets;
tests/unit/controller/test_rules_worker_imports.py keeps the shell out).

The protocol, pickles over two pipes: for each (snapshot, rule ids or None for every rule)
received, it answers ("rules", [(id, title)]), then one (id, findings) per rule, in order.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from vgpu_operator import heap

MODULES = ("vgpu_operator.core.rules",)  # imported by the worker: registers the rules


class Duplex:
    """A reading and a writing Connection over two pipes, used as one."""

    def __init__(self, reader: Connection, writer: Connection) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    def of(cls, read_fd: int, write_fd: int) -> Duplex:
        return cls(Connection(read_fd, writable=False), Connection(write_fd, readable=False))

    def send(self, obj: Any) -> None:
        self.writer.send(obj)

    def recv(self) -> Any:
        return self.reader.recv()

    def poll(self, timeout: float) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def serve(conn: Any, modules: Sequence[str]) -> None:
    """Import the rules, then answer each snapshot received, until the pipe closes."""
    for module in modules:
        importlib.import_module(module)
    from vgpu_operator.core.rules import base

    while True:
        try:
            snapshot, only = conn.recv()
        except (EOFError, OSError):
            return
        chosen = [r for r in base.RULES.values() if only is None or r.id in only]
        conn.send(("rules", [(r.id, r.title) for r in chosen]))
        for r in chosen:
            conn.send((r.id, base.run_rules(snapshot, only=[r.id]).findings))
        # Between passes the worker holds nothing: a snapshot of 5,000 nodes and their GPU pods
        # is about 20 MiB, freed here rather than when the next one arrives.
        del snapshot, chosen
        gc.collect()
        heap.give_back()


def main(argv: Sequence[str]) -> int:
    serve(Duplex.of(int(argv[0]), int(argv[1])), argv[2:] or MODULES)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
