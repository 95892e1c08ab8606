"""`vgpu_operator.exposition` writes what prometheus_client writes: the same metrics, made and
moved the same way in both libraries, render to the same text (prometheus_client's `_created`
series left out, which this format does not need), and the agent's page parses with
prometheus_client's own parser. `exposition_process` exports the families prometheus_client's
default collectors export, with the same names, types, HELP and labels, and plausible values."""

from __future__ import annotations

import resource

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

from vgpu_operator import exposition, exposition_process
from vgpu_operator.agent import metrics as agent_metrics


def _without_created(text: str) -> str:
    """prometheus_client's text without its `_created` families (HELP, TYPE and samples)."""
    kept = []
    for line in text.splitlines():
        name = line.split(" ")[2] if line.startswith("# ") else line.split("{")[0].split(" ")[0]
        if not name.endswith("_created"):
            kept.append(line + "\n")
    return "".join(kept)


def test_the_same_metrics_render_as_prometheus_client_renders_them() -> None:
    ours = exposition.Registry()
    theirs = prometheus_client.CollectorRegistry()
    help = 'Calls with "quotes", a back\\slash and a\nnewline'
    counters = (
        exposition.Counter("t_calls_total", help, ["outcome"], registry=ours),
        prometheus_client.Counter("t_calls_total", help, ["outcome"], registry=theirs),
    )
    plain = (
        exposition.Counter("t_plain_total", "No labels", registry=ours),
        prometheus_client.Counter("t_plain_total", "No labels", registry=theirs),
    )
    gauges = (
        exposition.Gauge("t_gpus", "GPUs", ["model", "mig_mode"], registry=ours),
        prometheus_client.Gauge("t_gpus", "GPUs", ["model", "mig_mode"], registry=theirs),
    )
    buckets = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
    histograms = (
        exposition.Histogram("t_seconds", "Time", ["state"], buckets=buckets, registry=ours),
        prometheus_client.Histogram(
            "t_seconds", "Time", ["state"], buckets=buckets, registry=theirs
        ),
    )
    bare = (
        exposition.Histogram("t_bare_seconds", "Bare", buckets=(1, 1e7), registry=ours),
        prometheus_client.Histogram("t_bare_seconds", "Bare", buckets=(1, 1e7), registry=theirs),
    )
    for counter, gauge, histogram, plain_counter, bare_histogram in zip(
        counters, gauges, histograms, plain, bare, strict=True
    ):
        counter.labels(outcome="ok").inc()
        counter.labels(outcome="ok").inc(2.5)
        counter.labels(outcome='we"ird\\one\n').inc()
        plain_counter.inc()
        gauge.labels(model="NVIDIA A100-SXM4-80GB", mig_mode="enabled").set(3)
        gauge.labels(model="x", mig_mode="n/a").set(1.5e-7)
        gauge.labels(model="y", mig_mode="n/a").set(12345678.0)
        for seconds in (0.05, 0.07, 1, 119.9, 120, 500):
            histogram.labels(state="success").observe(seconds)
        histogram.labels(state="failed")  # a series with nothing observed
        bare_histogram.observe(3)
    assert ours.render().decode() == _without_created(
        prometheus_client.generate_latest(theirs).decode()
    )
    counters[0].clear()
    counters[1].clear()
    gauges[0].clear()
    gauges[1].clear()
    assert ours.render().decode() == _without_created(
        prometheus_client.generate_latest(theirs).decode()
    )


def test_go_floats_match_prometheus_client() -> None:
    from prometheus_client.utils import floatToGoString

    for value in (0.0, 1, -2.5, 0.1, 1e-9, 123456.0, 1234567.0, 1e22, float("inf"), -float("inf")):
        assert exposition.go_float(value) == floatToGoString(value), value
    assert exposition.go_float(float("nan")) == "NaN"


def test_the_process_families_are_prometheus_clients_defaults() -> None:
    ours = exposition.Registry()
    exposition_process.install(ours)
    theirs = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=theirs)
    prometheus_client.GCCollector(registry=theirs)
    prometheus_client.PlatformCollector(registry=theirs)

    def shape(text: str) -> dict[str, tuple[str, str, list[tuple[str, ...]]]]:
        return {
            f.name: (f.type, f.documentation, sorted(tuple(sorted(s.labels)) for s in f.samples))
            for f in text_string_to_metric_families(text)
        }

    mine = ours.render().decode()
    assert shape(mine) == shape(prometheus_client.generate_latest(theirs).decode())
    values = {s.name: s for f in text_string_to_metric_families(mine) for s in f.samples}
    (info,) = [s for s in values.values() if s.name == "python_info"]
    import platform

    assert info.labels["version"] == platform.python_version()
    assert info.labels["implementation"] == platform.python_implementation()
    rss = values["process_resident_memory_bytes"].value
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert 0 < rss <= peak * 1.01
    assert 0 < values["process_open_fds"].value <= values["process_max_fds"].value


def test_the_agents_page_parses_and_has_its_families() -> None:
    families = {
        f.name: f for f in text_string_to_metric_families(agent_metrics.page().body.decode())
    }
    assert agent_metrics.page().content_type == "text/plain; version=0.0.4; charset=utf-8"
    for name, kind in (
        ("vgpu_operator_agent_nvidia_smi_calls", "counter"),
        ("vgpu_operator_agent_nvidia_smi_timeouts", "counter"),
        ("vgpu_operator_agent_nvidia_smi_duration_seconds", "histogram"),
        ("vgpu_operator_agent_mig_applies", "counter"),
        ("vgpu_operator_agent_mig_apply_duration_seconds", "histogram"),
        ("vgpu_operator_agent_state", "gauge"),
        ("vgpu_operator_agent_gpus", "gauge"),
        ("vgpu_operator_agent_mig_instances", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
    ):
        assert families[name].type == kind, name
    outcomes = {
        s.labels["outcome"] for s in families["vgpu_operator_agent_nvidia_smi_calls"].samples
    }
    assert outcomes == set(agent_metrics.SMI_OUTCOMES)  # every series from the start
