"""The image the chart deploys, run by a container engine against the local apiserver.

`make image-test-prereqs` builds it (on a base made from Debian's packages; `.ci/run` installs
podman, buildah, runc and mmdebstrap first) as VGPU_TEST_IMAGE, default
localhost/vgpu-operator:test. Every container uses the host's network (`--network host`: the
apiserver listens on 127.0.0.1) and gets what a pod of the chart gets: the ServiceAccount's
token, CA and namespace at /var/run/secrets/kubernetes.io/serviceaccount with
KUBERNETES_SERVICE_HOST/PORT (in-cluster credentials, no kubeconfig), and the args, env,
mounts and securityContext `helm template` renders:

- the controller as uid 65532, read-only root filesystem, every capability dropped, no
  privilege escalation, /tmp a tmpfs (the emptyDir), the rendered ConfigMap at /etc/vgpu-operator;
- an agent as the DaemonSet runs it: root, privileged, the host's PID namespace, read-only root
  filesystem, NODE_NAME; its nvidia-smi is the fake (devtools/, mounted read-only) run by the
  image's Python, the node's simulated GPUs in a directory mounted writable.

A MIG policy converges (the controller releases the layout, the agent applies it to the fake
GPUs and reports success, the policy counts the node ready) and `doctor` run from the image says
what the checkout's `doctor` says. VGPU_SKIP_IMAGE_TESTS=1 skips this module, on a machine
without a container engine; nothing else skips it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.cluster.agentkit import agent_kubeconfig_path, state_of
from tests.cluster.helpers import NodeFactory, PolicyFactory, eventually, unique
from tests.kit.podresources import PodResourcesDouble, socket_path
from vgpu_devcluster import binaries
from vgpu_devcluster.agentproc import FakeGpus, fake_model
from vgpu_devcluster.cluster import free_port
from vgpu_devcluster.install import OPERATOR_NAMESPACE, render_chart
from vgpu_operator.kubeapi import NotFound, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials

__all__ = ["agent_kubeconfig_path"]  # fixture

if os.environ.get("VGPU_SKIP_IMAGE_TESTS") == "1":
    pytest.skip("VGPU_SKIP_IMAGE_TESTS=1: the image is not tested", allow_module_level=True)

ROOT = binaries.repo_root()
IMAGE = os.environ.get("VGPU_TEST_IMAGE", "localhost/vgpu-operator:test")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
DEVTOOLS = "/opt/vgpu-devtools"  # devtools/ in the agent's container (read-only)
IMAGE_PYTHON = "/opt/vgpu-operator/bin/python"


# --- the engine ---------------------------------------------------------------------------------


@dataclass
class Engine:
    """docker or podman as hack/image/image.sh sets it up (podman: its containers.conf)."""

    path: str
    env: dict[str, str]
    started: list[str] = field(default_factory=list)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.path, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )

    def start(
        self, name: str, flags: list[str], args: list[str], log: Path
    ) -> subprocess.Popen[bytes]:
        """`run --rm --name NAME FLAGS IMAGE ARGS` in the background, its output to `log`."""
        self.started.append(name)
        with open(log, "wb") as out:
            return subprocess.Popen(
                [self.path, "run", "--rm", "--name", name, *flags, IMAGE, *args],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def stop(self, name: str, timeout: int = 30) -> None:
        self.run("stop", "-t", str(timeout), name, timeout=timeout + 30)

    def remove_all(self) -> None:
        for name in self.started:
            self.run("rm", "-f", name, timeout=60)


@pytest.fixture(scope="module")
def engine() -> Engine:
    done = subprocess.run(
        [str(ROOT / "hack" / "image" / "image.sh"), "env"], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.fail(
            f"no container engine to run the image with:\n{done.stderr}\n"
            "(make image-test-prereqs builds the image; VGPU_SKIP_IMAGE_TESTS=1 skips this test)"
        )
    found = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    env = dict(os.environ)
    if found.get("CONTAINERS_CONF"):
        env["CONTAINERS_CONF"] = found["CONTAINERS_CONF"]
    assert Path(found["ENGINE"]).name in ("docker", "podman"), (
        f"{found['ENGINE']} cannot run containers: the image test needs docker or podman"
    )
    engine = Engine(found["ENGINE"], env)
    inspected = engine.run("image", "inspect", IMAGE)
    if inspected.returncode != 0:
        pytest.fail(
            f"no image {IMAGE}: build it with `make image-test-prereqs`\n{inspected.stderr}"
        )
    return engine


@pytest.fixture
def containers(engine: Engine) -> Iterator[Engine]:
    """The engine; every container started through it is removed after the test."""
    yield engine
    engine.remove_all()
    engine.started.clear()


def image_config(engine: Engine) -> dict[str, Any]:
    [inspected] = json.loads(engine.run("image", "inspect", IMAGE).stdout)
    config: dict[str, Any] = inspected.get("Config") or inspected["config"]
    return config


# --- what a pod of the chart gets ---------------------------------------------------------------


def service_account_dir(kubeconfig: Path, into: Path) -> tuple[Path, dict[str, str]]:
    """The ServiceAccount directory a pod mounts (token, ca.crt, namespace) made from a token
    kubeconfig of that ServiceAccount, and the env the kubelet sets beside it."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"]["token"]
    into.mkdir(parents=True, exist_ok=True)
    (into / "token").write_text(token)
    shutil.copyfile(cluster["certificate-authority"], into / "ca.crt")
    (into / "namespace").write_text(OPERATOR_NAMESPACE)
    readable(into)
    host, _, port = cluster["server"].removeprefix("https://").rpartition(":")
    return into, {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def readable(directory: Path) -> None:
    """World-readable (pytest's temp directories are 0700; the controller is uid 65532)."""
    directory.chmod(0o755)
    for f in directory.iterdir():
        f.chmod(0o755 if f.is_dir() or os.access(f, os.X_OK) else 0o644)


def pod_of(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [pod] = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == kind]
    return pod


def security_flags(pod: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """The pod's and container's securityContext as `run` flags (what the chart sets only)."""
    psc, csc = pod.get("securityContext") or {}, container.get("securityContext") or {}
    flags: list[str] = []
    user = csc.get("runAsUser", psc.get("runAsUser"))
    group = csc.get("runAsGroup", psc.get("runAsGroup"))
    if user is not None:
        flags.append(f"--user={user}" + (f":{group}" if group is not None else ""))
    if csc.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    if csc.get("privileged"):
        flags.append("--privileged")
    if "ALL" in ((csc.get("capabilities") or {}).get("drop") or []):
        flags.append("--cap-drop=all")
    if csc.get("allowPrivilegeEscalation") is False:
        flags.append("--security-opt=no-new-privileges")
    if pod.get("hostPID"):
        flags.append("--pid=host")
    return flags


def env_flags(container: dict[str, Any], field_values: dict[str, str]) -> list[str]:
    """The container's env: values as rendered, downward-API fields from `field_values`."""
    flags = []
    for var in container.get("env") or []:
        if "value" in var:
            flags.append(f"--env={var['name']}={var['value']}")
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            flags.append(f"--env={var['name']}={field_values[path]}")
    return flags


def mount_flags(
    pod: dict[str, Any], container: dict[str, Any], sources: dict[str, str]
) -> list[str]:
    """The container's volumeMounts: an emptyDir as a tmpfs, the others from `sources` (volume
    name -> host directory); a volume the test does not know fails it."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    flags = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            flags.append(f"--tmpfs={mount['mountPath']}")
        elif mount["name"] in sources:
            ro = ":ro" if mount.get("readOnly") else ""
            flags.append(f"--volume={sources[mount['name']]}:{mount['mountPath']}{ro}")
        elif "hostPath" in volume:
            continue  # the node's own paths (nvidia-persistenced's socket): none here
        else:
            raise AssertionError(f"the test does not provide volume {mount['name']}: {volume}")
    return flags


def container_nvidia_smi(fake: FakeGpus, purelib: str) -> None:
    """Rewrite the fake nvidia-smi's wrapper (fakesmi_state.write_wrapper) to run in the
    agent's container: the image's Python, the image's vgpu_operator, devtools/ as mounted."""
    import vgpu_operator
    from vgpu_devcluster import fakesmi

    text = fake.binary.read_text()
    swaps = {
        sys.executable: IMAGE_PYTHON,
        str(Path(vgpu_operator.__file__).resolve().parent): f"{purelib}/vgpu_operator",
        str(Path(fakesmi.__file__).resolve().parent): f"{DEVTOOLS}/vgpu_devcluster",
    }
    for host, inside in swaps.items():
        assert host in text, f"the fake nvidia-smi wrapper has changed form:\n{text}"
        text = text.replace(host, inside)
    fake.binary.write_text(text)


def healthz(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return int(response.status)
    except OSError:
        return 0


async def wait_healthy(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Until /healthz answers 200, as the chart's readiness probe asks; fails early, with the
    container's output, if the container exited."""
    deadline = time.monotonic() + 90
    while await asyncio.to_thread(healthz, port) != 200:
        assert proc.poll() is None, f"{what} exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"{what} not healthy:\n{log.read_text()[-4000:]}"
        await asyncio.sleep(0.5)


def stop(engine: Engine, name: str, proc: subprocess.Popen[bytes], log: Path) -> int:
    engine.stop(name)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{name} did not stop:\n{log.read_text()[-4000:]}") from None


# --- the image alone ----------------------------------------------------------------------------


def test_the_image_runs_its_commands_as_non_root_from_a_read_only_root(engine: Engine) -> None:
    config = image_config(engine)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["vgpu-operator"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert config["Labels"]["org.opencontainers.image.version"] == version
    ro = ["run", "--rm", "--read-only", "--network=none", IMAGE]
    helped = engine.run(*ro, "--help")
    assert helped.returncode == 0 and "doctor" in helped.stdout, helped.stderr
    # the CRD from the image is the checkout's
    crds = engine.run(*ro, "crds")
    assert crds.returncode == 0, crds.stderr
    mine = [yaml.safe_load(f.read_text()) for f in sorted((ROOT / "crds").glob("*.yaml"))]
    assert [d for d in yaml.safe_load_all(crds.stdout) if d] == mine
    # only what runs: the virtualenv holds no pip, no setuptools, nothing of devtools/, and
    # nothing of a build secret (the CA bundle of a proxied build) is left; the licence is there
    probe = (
        "import importlib.metadata as md, importlib.util as u, os; "
        "print([m for m in ('pip', 'setuptools', 'vgpu_devcluster') if u.find_spec(m)], "
        "os.path.exists('/run/secrets/ca-bundle'), "
        "any(f.name == 'LICENSE' for f in md.files('vgpu-operator') or ()))"
    )
    left = engine.run(
        "run",
        "--rm",
        "--read-only",
        "--network=none",
        "--entrypoint",
        IMAGE_PYTHON,
        IMAGE,
        "-c",
        probe,
    )
    assert left.stdout.strip() == "[] False True", left.stdout + left.stderr


# --- the chart's controller and agent from the image ---------------------------------------------


@pytest.fixture
def operator_sa(installed: Credentials) -> Path:
    assert installed.kubeconfig is not None
    return Path(installed.kubeconfig)


@pytest.fixture
def kubelet_dir() -> Iterator[str]:
    """The directory of a kubelet PodResources socket, served by a double of the real API."""
    kubelet = PodResourcesDouble(socket_path()).start()
    try:
        yield str(Path(kubelet.socket).parent)
    finally:
        kubelet.stop()


async def test_controller_and_agent_from_the_image_converge_a_policy_and_doctor_agrees(
    api: client.ApiClient,
    operator_sa: Path,
    agent_kubeconfig_path: Path,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
    tmp_path: Path,
    containers: Engine,
    kubelet_dir: str,
) -> None:
    engine = containers
    purelib = engine.run(
        "run",
        "--rm",
        "--network=none",
        "--entrypoint",
        IMAGE_PYTHON,
        IMAGE,
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
    ).stdout.strip()
    assert purelib.startswith("/opt/vgpu-operator/"), purelib

    pool = unique("image")
    [node] = await make_nodes("A100-SXM4-80GB", 1, gpus=1, labels={"test/pool": pool})
    gpus_dir = tmp_path / "gpus"
    fake = FakeGpus.create(gpus_dir, node, fake_model("A100-SXM4-80GB"), 1)
    container_nvidia_smi(fake, purelib)
    readable(gpus_dir)

    ports = {k: free_port() for k in ("metrics", "liveness", "agent_liveness", "agent_metrics")}
    docs = render_chart(
        values={
            "metrics.port": ports["metrics"],
            "liveness.port": ports["liveness"],
            "agent.liveness.port": ports["agent_liveness"],
            "monitoring.agent.port": ports["agent_metrics"],
            "agent.nvidiaSmi.path": str(fake.binary),
            # The session's admission policies are rendered with the suite's values (another
            # hash than this render's): the image's controller would find them not the chart's
            # and only observe. This test is about the image; the check has its own
            # (test_admission_check.py).
            "config.requireAdmissionPolicies": "false",
        }
    )
    [configmap] = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-config")
    ]
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    for key, value in configmap["data"].items():
        (config_dir / key).write_text(value)
    readable(config_dir)

    # the controller, as the Deployment runs it
    controller_pod = pod_of(docs, "Deployment")
    [controller] = controller_pod["containers"]
    controller_sa, sa_env = service_account_dir(operator_sa, tmp_path / "sa-controller")
    name = unique("vgpu-image-controller")
    flags = ["--network=host", f"--volume={controller_sa}:{SA_DIR}:ro"]
    flags += [f"--env={k}={v}" for k, v in sa_env.items()]
    flags += security_flags(controller_pod, controller)
    flags += env_flags(
        controller, {"metadata.name": name, "metadata.namespace": OPERATOR_NAMESPACE}
    )
    flags += mount_flags(controller_pod, controller, {"config": str(config_dir)})
    assert {"--user=65532:65532", "--read-only", "--cap-drop=all"} <= set(flags), flags
    controller_log = tmp_path / "controller.log"
    running = engine.start(name, flags, controller["args"], controller_log)
    await wait_healthy(ports["liveness"], running, controller_log, "the controller")

    # an agent, as the DaemonSet runs it on `node`
    agent_pod = pod_of(docs, "DaemonSet")
    [agent] = agent_pod["containers"]
    agent_sa, sa_env = service_account_dir(agent_kubeconfig_path, tmp_path / "sa-agent")
    agent_name = unique("vgpu-image-agent")
    flags = ["--network=host", f"--volume={agent_sa}:{SA_DIR}:ro"]
    flags += [f"--env={k}={v}" for k, v in sa_env.items()]
    flags += [f"--volume={ROOT / 'devtools'}:{DEVTOOLS}:ro", f"--volume={gpus_dir}:{gpus_dir}"]
    flags += [f"--env=FAKE_NVIDIA_SMI_STATE={fake.state}"]
    flags += security_flags(agent_pod, agent)
    flags += env_flags(agent, {"spec.nodeName": node})
    # the node's kubelet, as far as the agent asks it: its PodResources socket (a double that
    # speaks the real API; no pod holds a device), in the directory the chart mounts
    flags += mount_flags(agent_pod, agent, {"pod-resources": kubelet_dir})
    assert {"--privileged", "--user=0", "--read-only", "--pid=host"} <= set(flags), flags
    agent_log = tmp_path / "agent.log"
    agent_running = engine.start(agent_name, flags, agent["args"], agent_log)
    await wait_healthy(ports["agent_liveness"], agent_running, agent_log, "the agent")

    spec = {
        "nodeSelector": {"matchLabels": {"test/pool": pool}},
        "mode": "mig",
        "mig": {"partitioning": "static", "layout": [{"gpus": "all", "profiles": {"1g.10gb": 7}}]},
    }
    policy = await policies("image", spec)

    def logs() -> str:
        return (
            f"controller:\n{controller_log.read_text()[-3000:]}\n"
            f"agent:\n{agent_log.read_text()[-3000:]}"
        )

    async def converged() -> bool:
        assert running.poll() is None and agent_running.poll() is None, logs()
        status = (await request(api, "GET", policy_path(policy))).get("status") or {}
        return await state_of(api, node) == "success" and status.get("readyNodes") == 1

    try:
        await eventually(converged, timeout=120)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{logs()}") from None
    gis = fake.load()["gpus"][0]["gis"]
    assert Counter(gi["profile_id"] for gi in gis) == Counter({19: 7})  # 1g.10gb on A100-80GB

    # doctor from the image (a kubeconfig this time, mounted read-only) says what the
    # checkout's doctor says about the same cluster
    kube_dir = tmp_path / "kube"
    kube_dir.mkdir()
    kubeconfig = yaml.safe_load(operator_sa.read_text())
    shutil.copyfile(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority"], kube_dir / "ca.crt"
    )
    kubeconfig["clusters"][0]["cluster"]["certificate-authority"] = "/kube/ca.crt"
    (kube_dir / "config").write_text(yaml.safe_dump(kubeconfig))
    readable(kube_dir)
    doctor = ["doctor", "--config=/etc/vgpu-operator/config.yaml", "-o", "json"]
    from_image = await asyncio.to_thread(
        engine.run,
        "run",
        "--rm",
        "--network=host",
        "--read-only",
        "--user=65532:65532",
        f"--volume={kube_dir}:/kube:ro",
        f"--volume={config_dir}:/etc/vgpu-operator:ro",
        "--env=KUBECONFIG=/kube/config",
        IMAGE,
        *doctor,
    )
    host = await asyncio.to_thread(
        subprocess.run,
        [
            str(Path(sys.executable).parent / "vgpu-operator"),
            "doctor",
            f"--config={config_dir / 'config.yaml'}",
            "-o",
            "json",
            f"--kubeconfig={operator_sa}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert from_image.returncode in (0, 1), from_image.stdout + from_image.stderr
    assert (from_image.returncode, json.loads(from_image.stdout)) == (
        host.returncode,
        json.loads(host.stdout),
    ), (from_image.stderr, host.stderr)

    # the policy goes while the controller runs (its finalizer), then both stop on SIGTERM
    await request(api, "DELETE", policy_path(policy), field_manager=None)

    async def gone() -> bool:
        try:
            await request(api, "GET", policy_path(policy))
        except NotFound:
            return True
        return False

    await eventually(gone, timeout=60)

    # the node is left as whole-gpu: the agent turns MIG off before it is stopped
    async def mig_off() -> bool:
        assert agent_running.poll() is None, logs()
        [gpu] = fake.load()["gpus"]
        idle = not gpu["mig_current"] and not gpu["mig_pending"] and gpu["gis"] == []
        return idle and await state_of(api, node) == "success"

    await eventually(mig_off, timeout=60)
    assert await asyncio.to_thread(stop, engine, agent_name, agent_running, agent_log) == 0, logs()
    assert await asyncio.to_thread(stop, engine, name, running, controller_log) == 0, logs()
