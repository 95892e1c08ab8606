"""The upstream install manifests in devcluster/data/upstream are the projects' files, byte for
byte, and the helper applies the documents the tests and the demo rely on, unchanged."""

from __future__ import annotations

import pytest

from vgpu_devcluster import upstream


@pytest.mark.parametrize("name", sorted(upstream.FILES))
def test_each_file_is_the_one_its_project_ships(name: str) -> None:
    # the digests of the files at the tags the data README names (compared with the projects'
    # repositories when they were copied)
    assert upstream.sha256(name) == upstream.FILES[name].sha256
    f = upstream.FILES[name]
    assert f.url == f"https://github.com/{f.repository}/blob/{f.tag}/{f.path}"
    readme = (upstream.DATA / "README.md").read_text()
    assert f"`{name}`" in readme and f.url in readme


def test_every_file_in_the_directory_is_listed() -> None:
    on_disk = {p.name for p in upstream.DATA.iterdir() if p.name != "README.md"}
    assert on_disk == set(upstream.FILES)


def test_volcano_is_its_crds_and_the_scheduler_without_webhooks() -> None:
    docs = upstream.volcano_documents()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert kinds >= upstream.SCHEDULER_OBJECTS
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert {"queues.scheduling.volcano.sh", "podgroups.scheduling.volcano.sh"} <= {
        d["metadata"]["name"] for d in crds
    }
    assert not [d for d in docs if "Webhook" in d["kind"] or d["kind"] in ("Job", "Service")]
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "docker.io/volcanosh/vc-scheduler:v1.15.1"
    [conf] = [d for d in docs if d["kind"] == "ConfigMap"]
    assert "deviceshare" not in conf["data"]["volcano-scheduler.conf"]


@pytest.mark.parametrize("version", upstream.HAMI_VGPU_VERSIONS)
def test_the_hami_plugin_as_shipped_has_no_placement_for_the_policies(version: str) -> None:
    docs = upstream.hami_vgpu_documents(version)
    assert [d["kind"] for d in docs] == [
        "ConfigMap",
        "ConfigMap",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
    ]
    spec = docs[-1]["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    assert {t["key"] for t in spec["tolerations"]} == {
        "CriticalAddonsOnly",
        "volcano.sh/gpu-memory",
    }
    assert spec["containers"][0]["image"].endswith(f":{version}")


def test_an_unknown_plugin_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no HAMi vGPU plugin manifest v9\.9\.9"):
        upstream.hami_vgpu_documents("v9.9.9")
