"""A bare Kopf operator, the figure the operator's memory is set beside in bench/scale.py: one
event handler on every Pod of the cluster, unfiltered, doing nothing, with Kopf's defaults.
It prints `seen <n>` every 100 pod events (the benchmark reads it to know the listing is in).

Usage: KUBECONFIG=<admin kubeconfig> python bench/bare_kopf.py
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

seen = 0


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False
    settings.scanning.disabled = True


@kopf.on.event("", "v1", "pods")
async def pod_event(**_: Any) -> None:
    global seen
    seen += 1
    if seen % 100 == 0:
        print(f"seen {seen}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    kopf.run(clusterwide=True, standalone=True)
