"""Prometheus metrics for a process that cannot afford prometheus_client: counters, gauges and
histograms with labels, and the text exposition format 0.0.4
(https://prometheus.io/docs/instrumenting/exposition_formats/), standard library only.

The node agent runs on every GPU node; prometheus_client costs it about 12 MiB of resident memory
(bench/agent_cost.py), most of it the standard library it pulls in. The output is what
prometheus_client 0.26's `generate_latest` writes for the same metrics
(prometheus_client/exposition.py): `# HELP` and `# TYPE` per family, label names sorted, values as
Go formats floats (`floatToGoString`), histogram buckets cumulative with `le` last and `+Inf`,
then `_count` and `_sum`, except the `_created` series, which are not written (Prometheus does
not read them from this format). tests/unit/test_exposition.py holds the two outputs equal.

`REGISTRY` is the process's one registry (as prometheus_client's is): metrics register there when
made, and `collector`s (`exposition_process`) add families computed at each scrape.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
INF = float("inf")

Sample = tuple[str, dict[str, str], float]  # name, labels, value


@dataclass
class Family:
    """One metric family as a scrape sees it: its samples computed now."""

    name: str
    help: str
    type: str  # counter, gauge, histogram
    samples: list[Sample] = field(default_factory=list)


class Registry:
    def __init__(self) -> None:
        self._metrics: list[Metric] = []
        self._collectors: list[Callable[[], Iterable[Family]]] = []

    def register(self, metric: Metric) -> None:
        if any(m.name == metric.name for m in self._metrics):
            raise ValueError(f"metric {metric.name} is registered already")
        self._metrics.append(metric)

    def collector(self, collect: Callable[[], Iterable[Family]]) -> None:
        """Families computed at each scrape (the process's memory, its CPU time)."""
        self._collectors.append(collect)

    def families(self) -> Iterator[Family]:
        for metric in self._metrics:
            yield metric.family()
        for collect in self._collectors:
            yield from collect()

    def render(self) -> bytes:
        """Every family in the text format 0.0.4."""
        return render(self.families())


REGISTRY = Registry()


def render(families: Iterable[Family]) -> bytes:
    out: list[str] = []
    for fam in families:
        out.append(f"# HELP {fam.name} {_escape_help(fam.help)}\n")
        out.append(f"# TYPE {fam.name} {fam.type}\n")
        for name, labels, value in fam.samples:
            if labels:
                pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
                out.append(f"{name}{{{pairs}}} {go_float(value)}\n")
            else:
                out.append(f"{name} {go_float(value)}\n")
    return "".join(out).encode()


def go_float(value: float) -> str:
    """A float as Go's strconv formats it in the exposition (prometheus_client's
    `floatToGoString`: Go switches to exponents sooner than Python)."""
    d = float(value)
    if d == INF:
        return "+Inf"
    if d == -INF:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Metric:
    type = ""

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry | None = REGISTRY,
    ) -> None:
        self.name = name
        self.help = help
        self.labelnames = tuple(labelnames)
        if not self.labelnames:
            self._child(())  # an unlabelled metric is exported from the start, as 0
        if registry is not None:
            registry.register(self)

    def _key(self, labels: dict[str, object]) -> tuple[str, ...]:
        if not self.labelnames:
            raise ValueError(f"{self.name} has no labels")
        if set(labels) != set(self.labelnames):
            raise ValueError(f"{self.name}: labels {sorted(labels)}, expected {self.labelnames}")
        return tuple(str(labels[n]) for n in self.labelnames)

    def _child(self, key: tuple[str, ...]) -> object:
        raise NotImplementedError

    def _unlabelled(self) -> tuple[str, ...]:
        if self.labelnames:
            raise ValueError(f"{self.name}: labels {self.labelnames} first (.labels(...))")
        return ()

    def clear(self) -> None:
        """Drop every labelled series (a labelled metric only)."""
        if self.labelnames:
            self._forget()

    def _forget(self) -> None:
        raise NotImplementedError

    def family(self) -> Family:
        raise NotImplementedError


class _Value:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class _Scalar(Metric):
    """A family of one value per series, a counter's or a gauge's: its series are made on first
    use and exported with their labels, in the order they were made."""

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry | None = REGISTRY,
    ) -> None:
        self._values: dict[tuple[str, ...], _Value] = {}
        super().__init__(name, help, labelnames, registry=registry)

    def _child(self, key: tuple[str, ...]) -> _Value:
        return self._values.setdefault(key, _Value())

    def _forget(self) -> None:
        self._values.clear()

    def family(self) -> Family:
        samples = [
            (self.name, dict(zip(self.labelnames, k, strict=True)), v.value)
            for k, v in self._values.items()
        ]
        return Family(self.name, self.help, self.type, samples)


class Counter(_Scalar):
    """A counter; its name ends in `_total` (as the exposition writes it)."""

    type = "counter"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        registry: Registry | None = REGISTRY,
    ) -> None:
        if not name.endswith("_total"):
            raise ValueError(f"counter {name}: the name ends in _total")
        super().__init__(name, help, labelnames, registry=registry)

    def labels(self, **labels: object) -> CounterChild:
        return CounterChild(self._child(self._key(labels)))

    def inc(self, amount: float = 1.0) -> None:
        CounterChild(self._child(self._unlabelled())).inc(amount)


@dataclass(frozen=True, slots=True)
class CounterChild:
    _value: _Value

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        self._value.value += amount


class Gauge(_Scalar):
    type = "gauge"

    def labels(self, **labels: object) -> GaugeChild:
        return GaugeChild(self._child(self._key(labels)))

    def set(self, value: float) -> None:
        GaugeChild(self._child(self._unlabelled())).set(value)


@dataclass(frozen=True, slots=True)
class GaugeChild:
    _value: _Value

    def set(self, value: float) -> None:
        self._value.value = float(value)


class _Buckets:
    __slots__ = ("counts", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0.0] * size  # per bucket, not cumulative
        self.sum = 0.0


class Histogram(Metric):
    """A histogram with fixed upper bounds (`+Inf` added)."""

    type = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: Registry | None = REGISTRY,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds) or not bounds:
            raise ValueError(f"histogram {name}: buckets in increasing order")
        if bounds[-1] != INF:
            bounds.append(INF)
        self.bounds = bounds
        self._series: dict[tuple[str, ...], _Buckets] = {}
        super().__init__(name, help, labelnames, registry=registry)

    def _child(self, key: tuple[str, ...]) -> _Buckets:
        return self._series.setdefault(key, _Buckets(len(self.bounds)))

    def _forget(self) -> None:
        self._series.clear()

    def labels(self, **labels: object) -> HistogramChild:
        return HistogramChild(self.bounds, self._child(self._key(labels)))

    def observe(self, amount: float) -> None:
        HistogramChild(self.bounds, self._child(self._unlabelled())).observe(amount)

    def family(self) -> Family:
        samples: list[Sample] = []
        for key, series in self._series.items():
            labels = dict(zip(self.labelnames, key, strict=True))
            total = 0.0
            for bound, count in zip(self.bounds, series.counts, strict=True):
                total += count
                samples.append((f"{self.name}_bucket", {**labels, "le": go_float(bound)}, total))
            samples.append((f"{self.name}_count", labels, total))
            samples.append((f"{self.name}_sum", labels, series.sum))
        return Family(self.name, self.help, self.type, samples)


@dataclass(frozen=True, slots=True)
class HistogramChild:
    _bounds: list[float]
    _series: _Buckets

    def observe(self, amount: float) -> None:
        # the first bucket whose upper bound is at least the amount (le: "less or equal")
        self._series.counts[bisect_left(self._bounds, amount)] += 1
        self._series.sum += amount
