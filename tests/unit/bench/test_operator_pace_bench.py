"""bench/operator_pace.py: a histogram's count and sum read from prometheus_client's own text
exposition (the format the operator's metrics port serves), the main thread's run and wait
times from this process's /proc/PID/schedstat, and a window's difference."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.fixture
def pace(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("operator_pace")


def test_the_histogram_is_read_from_prometheus_clients_exposition(pace: ModuleType) -> None:
    registry = CollectorRegistry()
    passes = Histogram(pace.HISTOGRAM, "passes", registry=registry)
    for seconds in (0.5, 1.5, 4.0):
        passes.observe(seconds)
    text = generate_latest(registry).decode()
    assert pace.histogram(text) == (3.0, 6.0)
    assert pace.histogram("") == (0.0, 0.0)  # before its first pass: no samples yet


def test_a_window_is_the_difference_and_its_text_gives_the_mean(pace: ModuleType) -> None:
    ran, waited = pace.schedstat(os.getpid())
    assert ran > 0 and waited >= 0
    # Values a float holds exactly: the text rounds, the difference must not need to.
    before = pace.Pace(10.0, 4.0, 2.5, 1.0)
    after = pace.Pace(14.0, 12.0, 5.5, 16.0)
    window = after - before
    assert window == pace.Pace(4.0, 8.0, 3.0, 15.0)
    assert window.text() == (
        "4 reconcile passes, 2.00 s each on average; its event loop ran 3.0 s and waited "
        "15.0 s for a core"
    )
