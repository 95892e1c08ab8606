"""`kubeapi.credentials` without a cluster: where credentials are looked for, what each
kubeconfig form loads, and when and how a token is renewed (with a fake clock)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from vgpu_devcluster import certs, kubeconfigs
from vgpu_operator.kubeapi.credentials import (
    ENV_SA_DIR,
    EXEC_EARLY,
    TOKEN_FILE_PERIOD,
    Credentials,
    CredentialsError,
    Renewal,
    resolve,
)

SERVER = "https://127.0.0.1:6443"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def token_of(cfg: client.Configuration) -> str:
    return str(cfg.api_key.get("BearerToken"))


# -- resolve(): the order --------------------------------------------------------------------


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    """An environment in which every source exists: KUBECONFIG, a ServiceAccount dir with
    the service variables, and ~/.kube/config."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t")
    return {
        "HOME": str(home),
        "KUBECONFIG": "/from/env:/and/another",
        ENV_SA_DIR: str(sa),
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "6443",
    }


def test_the_flag_comes_first(places: dict[str, str]) -> None:
    creds = resolve("/from/flag", "ctx", environ=places)
    assert (creds.kubeconfig, creds.context) == ("/from/flag", "ctx")


def test_then_kubeconfig_with_every_path_it_names(places: dict[str, str]) -> None:
    creds = resolve(None, "ctx", environ=places)
    assert (creds.kubeconfig, creds.context) == ("/from/env:/and/another", "ctx")


def test_then_the_in_cluster_service_account(places: dict[str, str]) -> None:
    del places["KUBECONFIG"]
    creds = resolve(environ=places)
    assert creds.in_cluster
    assert creds.sa_dir == Path(places[ENV_SA_DIR])
    assert creds.environ == {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "6443",
    }
    assert "in-cluster" in creds.describe()


def test_an_empty_kubeconfig_variable_counts_as_unset(places: dict[str, str]) -> None:
    places["KUBECONFIG"] = ""
    assert resolve(environ=places).in_cluster


def test_a_token_without_the_service_host_is_not_in_cluster(places: dict[str, str]) -> None:
    del places["KUBECONFIG"], places["KUBERNETES_SERVICE_HOST"]
    creds = resolve(environ=places)
    assert creds.kubeconfig == str(Path(places["HOME"]) / ".kube" / "config")


def test_then_the_home_kubeconfig(places: dict[str, str]) -> None:
    del places["KUBECONFIG"]
    (Path(places[ENV_SA_DIR]) / "token").unlink()
    creds = resolve(None, "ctx", environ=places)
    assert creds.kubeconfig == str(Path(places["HOME"]) / ".kube" / "config")
    assert creds.context == "ctx"


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    sa = tmp_path / "no-sa"
    with pytest.raises(CredentialsError) as err:
        resolve(environ={"HOME": str(tmp_path), ENV_SA_DIR: str(sa)})
    message = str(err.value)
    for where in ("--kubeconfig", "KUBECONFIG", "~/.kube/config", f"{sa}/token"):
        assert where in message, message


# -- loading: every kubeconfig form ----------------------------------------------------------


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory) -> kubeconfigs.Identity:
    d = tmp_path_factory.mktemp("pki")
    ca = certs.generate_ca(d, "ca", "test-ca")
    client_ca = certs.generate_ca(d, "client-ca", "test-client-ca")
    cert = certs.issue_client_cert(client_ca, d, "admin", "admin-cert", ("system:masters",))
    (d / "token").write_text("file-token\n")  # as `echo` or `kubectl create token >` write it
    return kubeconfigs.Identity(
        server=SERVER,
        ca_file=ca.cert,
        token="inline-token",
        token_file=d / "token",
        client_cert=cert.cert,
        client_key=cert.key,
    )


@pytest.fixture(scope="module")
def forms(
    identity: kubeconfigs.Identity, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, kubeconfigs.Kubeconfig]:
    return kubeconfigs.write_forms(tmp_path_factory.mktemp("forms"), identity)


EXPECTED_TOKEN = {
    "ca-file-token": "Bearer inline-token",
    "ca-data-token": "Bearer inline-token",
    "token-file": "Bearer file-token",  # the newline dropped, as client-go does
    "exec-plugin": "Bearer file-token",
    "split-files": "Bearer inline-token",
}


@pytest.mark.parametrize("form", kubeconfigs.FORMS)
async def test_every_form_loads(
    form: str, forms: dict[str, kubeconfigs.Kubeconfig], identity: kubeconfigs.Identity
) -> None:
    k = forms[form]
    creds = Credentials(kubeconfig=k.path, context=k.context)
    cfg = await creds.configuration()
    assert cfg.host == SERVER
    assert cfg.ssl_ca_cert and Path(cfg.ssl_ca_cert).read_bytes() == identity.ca_file.read_bytes()
    assert cfg.api_key.get("BearerToken") == EXPECTED_TOKEN.get(form)
    if form.startswith("cert-"):
        assert Path(cfg.cert_file).read_bytes() == identity.client_cert.read_bytes()
        assert Path(cfg.key_file).read_bytes() == identity.client_key.read_bytes()
    info = await creds.connection_info()
    assert info.server == SERVER and info.ca_path == cfg.ssl_ca_cert
    assert info.token == (EXPECTED_TOKEN[form].split(" ", 1)[1] if form in EXPECTED_TOKEN else None)
    assert info.certificate_path == cfg.cert_file


async def test_the_split_form_needs_its_context(forms: dict[str, kubeconfigs.Kubeconfig]) -> None:
    """Its current context names a cluster no file defines: only `--context` makes it work."""
    with pytest.raises(CredentialsError):
        await Credentials(kubeconfig=forms["split-files"].path).configuration()


async def test_in_cluster_reads_the_service_account_dir(
    tmp_path: Path, identity: kubeconfigs.Identity
) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_bytes(identity.ca_file.read_bytes())
    env = {ENV_SA_DIR: str(tmp_path), "KUBERNETES_SERVICE_HOST": "127.0.0.1"}
    creds = resolve(environ={**env, "HOME": str(tmp_path)})
    cfg = await creds.configuration()
    assert cfg.host == "https://127.0.0.1:443"  # the port defaults as in a pod
    assert cfg.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert token_of(cfg) == "Bearer sa-token"


async def test_in_cluster_without_a_ca_says_so(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    creds = Credentials(sa_dir=tmp_path, environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1"})
    with pytest.raises(CredentialsError, match="in-cluster"):
        await creds.configuration()


# -- renewal ----------------------------------------------------------------------------------


def token_file_kubeconfig(tmp_path: Path, token: str) -> tuple[Credentials, Path]:
    source = tmp_path / "token"
    source.write_text(token)
    cluster = kubeconfigs.cluster_entry(SERVER, None)
    path = kubeconfigs.write(
        tmp_path / "kubeconfig", kubeconfigs.config(cluster, kubeconfigs.token_file_user(source))
    )
    return Credentials(kubeconfig=str(path)), source


async def installed(creds: Credentials, clock: FakeClock) -> tuple[Renewal, client.Configuration]:
    cfg = client.Configuration()
    loaded = await creds._load_into(cfg)
    renewal = Renewal(
        creds,
        token_file=loaded.token_file,
        exec_plugin=loaded.exec_plugin,
        expires=loaded.expires,
        clock=clock,
    )
    renewal.install(cfg)
    return renewal, cfg


async def test_a_token_file_is_read_again_after_its_period(tmp_path: Path) -> None:
    creds, source = token_file_kubeconfig(tmp_path, "one")
    clock = FakeClock()
    _, cfg = await installed(creds, clock)
    source.write_text("two")
    clock.now += TOKEN_FILE_PERIOD - 1
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer one"
    clock.now += 1
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer two"
    source.write_text("three")
    clock.now += 1  # the next read is a whole period after this one
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer two"
    clock.now += TOKEN_FILE_PERIOD
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer three"


async def test_a_failed_periodic_read_keeps_the_token_and_retries_next_period(
    tmp_path: Path,
) -> None:
    creds, source = token_file_kubeconfig(tmp_path, "one")
    clock = FakeClock()
    _, cfg = await installed(creds, clock)
    source.unlink()
    clock.now += TOKEN_FILE_PERIOD
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer one"
    source.write_text("two")
    clock.now += 1
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer one"  # not every request
    clock.now += TOKEN_FILE_PERIOD
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer two"


async def test_renew_copies_a_changed_token_and_says_whether_it_changed(tmp_path: Path) -> None:
    creds, source = token_file_kubeconfig(tmp_path, "one")
    renewal, cfg = await installed(creds, FakeClock())
    assert await renewal.renew(cfg) is False
    source.write_text("two\n")
    assert await renewal.renew(cfg) is True
    assert token_of(cfg) == "Bearer two"


async def test_the_client_renews_in_place(tmp_path: Path) -> None:
    """`Client.renew` (what a 401 calls) rewrites the live client's token."""
    creds, source = token_file_kubeconfig(tmp_path, "one")
    api = await creds.client()
    try:
        source.write_text("two")
        assert await api.renew() is True
        assert token_of(api.configuration) == "Bearer two"
        assert await api.renew() is False
    finally:
        await api.close()


def exec_kubeconfig(tmp_path: Path, expires: dt.datetime | None) -> tuple[Credentials, Path]:
    """An exec plugin printing the token in a file and, if given, an expiry."""
    source = tmp_path / "token"
    source.write_text("one")
    status = {"token": "$token"}
    if expires is not None:
        status["expirationTimestamp"] = f"{expires:%Y-%m-%dT%H:%M:%SZ}"
    credential = {
        "apiVersion": kubeconfigs.EXEC_API_VERSION,
        "kind": "ExecCredential",
        "status": status,
    }
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(f'#!/bin/sh\ntoken=$(cat "$1")\ncat <<EOF\n{json.dumps(credential)}\nEOF\n')
    plugin.chmod(0o755)
    cluster = kubeconfigs.cluster_entry(SERVER, None)
    path = kubeconfigs.write(
        tmp_path / "kubeconfig",
        kubeconfigs.config(cluster, kubeconfigs.exec_user(plugin, str(source))),
    )
    return Credentials(kubeconfig=str(path)), source


async def test_an_exec_plugin_runs_again_before_its_token_expires(tmp_path: Path) -> None:
    expires = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=600)
    creds, source = exec_kubeconfig(tmp_path, expires)
    clock = FakeClock()
    renewal, cfg = await installed(creds, clock)
    assert renewal.expires == expires
    due = renewal._next - clock.now
    assert 600 - EXEC_EARLY - 5 < due <= 600 - EXEC_EARLY
    source.write_text("two")
    clock.now += due - 1
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer one"
    clock.now += 1
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer two"


async def test_an_exec_plugin_without_expiry_runs_again_only_on_a_401(tmp_path: Path) -> None:
    creds, source = exec_kubeconfig(tmp_path, None)
    clock = FakeClock()
    renewal, cfg = await installed(creds, clock)
    assert cfg.refresh_api_key_hook is None
    source.write_text("two")
    clock.now += 10 * TOKEN_FILE_PERIOD
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer one"
    assert await renewal.renew(cfg) is True  # what the 401 path calls
    assert token_of(cfg) == "Bearer two"


async def test_the_in_cluster_token_is_renewed_like_a_token_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one")
    (tmp_path / "ca.crt").write_text("not checked until a connection is made")
    creds = Credentials(sa_dir=tmp_path, environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1"})
    clock = FakeClock()
    _, cfg = await installed(creds, clock)
    (tmp_path / "token").write_text("two")
    clock.now += TOKEN_FILE_PERIOD
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer two"
