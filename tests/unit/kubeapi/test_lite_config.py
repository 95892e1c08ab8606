"""`kubeapi.lite.config`: the node agent's credentials. In-cluster (the ServiceAccount's token and
CA), kubeconfigs with a token, a tokenFile (relative to the file, read again after its period),
a client certificate inline (used in the TLS handshake), several files merged with a context, a
kubeconfig in YAML; and every form the agent's client does not take refused with the field
named and the way out."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.kit.rawapi import RawApi, client_certificate, kubeconfig, serve, whole
from vgpu_operator.kubeapi.lite import LiteClient, Token, load
from vgpu_operator.kubeapi.source import CredentialsError, Source

NODE = {"kind": "Node", "metadata": {"name": "n1"}}


@pytest.fixture
async def raw(tmp_path: Path) -> AsyncIterator[RawApi]:
    async for api in serve(tmp_path):
        yield api


def answer_node(raw: RawApi) -> None:
    raw.answer("GET", "/api/v1/nodes/n1", whole(200, NODE))


async def test_in_cluster_reads_the_service_account(raw: RawApi, tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    assert raw.ca is not None
    (sa / "ca.crt").write_bytes(raw.ca.cert.read_bytes())
    (sa / "token").write_text("projected\n")
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(raw.port)}
    settings = load(Source(kubeconfig=None, sa_dir=sa, environ=env))
    assert settings.url == raw.server
    answer_node(raw)
    async with LiteClient(settings, user_agent="t") as api:
        assert await api.request("GET", "/api/v1/nodes/n1") == NODE
    assert raw.requests[0].headers["authorization"] == "Bearer projected"


def test_in_cluster_without_the_token_names_what_is_missing(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    with pytest.raises(CredentialsError, match=r"no ca\.crt in"):
        load(Source(kubeconfig=None, sa_dir=tmp_path, environ=env))


def test_a_token_file_is_read_again_after_its_period(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("one")
    now = [0.0]
    token = Token(path.read_text, period=60.0, clock=lambda: now[0])
    assert token.load_now() and token.current() == "one"
    path.write_text("two")
    now[0] = 59.0
    assert token.current() == "one"
    now[0] = 60.0
    assert token.current() == "two"
    path.unlink()  # a failed read keeps the token held
    assert not token.renew() and token.current() == "two"


async def test_a_relative_token_file_and_an_inline_client_certificate(
    raw: RawApi, tmp_path: Path
) -> None:
    (tmp_path / "tokens").mkdir()
    (tmp_path / "tokens" / "agent").write_text("from-file")
    cert = client_certificate(raw, "system:node:n1")
    user = {
        "tokenFile": "tokens/agent",  # relative to the kubeconfig's directory
        "client-certificate-data": base64.b64encode(cert.cert.read_bytes()).decode(),
        "client-key-data": base64.b64encode(cert.key.read_bytes()).decode(),
    }
    path = kubeconfig(raw, user, tmp_path / "config")
    answer_node(raw)
    async with LiteClient(load(Source(kubeconfig=str(path))), user_agent="t") as api:
        await api.request("GET", "/api/v1/nodes/n1")
    (request,) = raw.requests
    assert request.headers["authorization"] == "Bearer from-file"
    assert request.client_cert is not None
    subject = dict(kv for rdn in request.client_cert["subject"] for kv in rdn)
    assert subject["commonName"] == "system:node:n1"


async def test_several_files_merge_and_the_context_chooses(raw: RawApi, tmp_path: Path) -> None:
    assert raw.ca is not None
    first = tmp_path / "clusters"
    first.write_text(
        json.dumps(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": raw.server,
                            "certificate-authority": str(raw.ca.cert),
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "first-file-wins"}}],
                "current-context": "nowhere",
            }
        )
    )
    second = tmp_path / "users.yaml"  # YAML, as kubectl writes it
    second.write_text(
        "users:\n- name: u\n  user: {token: second}\n"
        "contexts:\n- name: chosen\n  context: {cluster: c, user: u}\n"
    )
    source = Source(kubeconfig=f"{first}:{second}", context="chosen")
    answer_node(raw)
    async with LiteClient(load(source), user_agent="t") as api:
        await api.request("GET", "/api/v1/nodes/n1")
    assert raw.requests[0].headers["authorization"] == "Bearer first-file-wins"
    with pytest.raises(CredentialsError, match="no context 'nowhere'"):
        load(Source(kubeconfig=f"{first}:{second}"))


@pytest.mark.parametrize(
    ("user", "cluster", "field"),
    [
        ({"exec": {"command": "aws"}}, {}, "'exec' (an exec credential plugin)"),
        ({"auth-provider": {"name": "oidc"}}, {}, "'auth-provider'"),
        ({"username": "u", "password": "p"}, {}, "'username' (basic authentication)"),
        ({"token": "t", "as": "admin"}, {}, "'as' (impersonation)"),
        ({"token": "t"}, {"proxy-url": "http://proxy:3128"}, "'proxy-url' (a proxy)"),
    ],
)
def test_what_the_agent_does_not_take_is_refused_with_the_field(
    tmp_path: Path, user: dict[str, Any], cluster: dict[str, Any], field: str
) -> None:
    path = tmp_path / "config"
    entry = {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True, **cluster}
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": entry}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    with pytest.raises(CredentialsError) as err:
        load(Source(kubeconfig=str(path)))
    assert field in str(err.value) and "run the agent in-cluster" in str(err.value)


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config"
    cluster = {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}
    path.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"client-certificate": "/x.crt"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    with pytest.raises(CredentialsError, match="without its key"):
        load(Source(kubeconfig=str(path)))


async def test_a_certificate_the_server_does_not_match_is_unreachable(
    raw: RawApi, tmp_path: Path
) -> None:
    """The CA is checked: a kubeconfig naming another CA does not reach the server."""
    other = tmp_path / "other"
    other.mkdir()
    async for elsewhere in serve(other):
        path = kubeconfig(raw, {"token": "t"}, tmp_path / "config")
        assert elsewhere.ca is not None
        config = json.loads(path.read_text())
        config["clusters"][0]["cluster"]["certificate-authority"] = str(elsewhere.ca.cert)
        path.write_text(json.dumps(config))
        from vgpu_operator import kubeapi

        async with LiteClient(load(Source(kubeconfig=str(path))), user_agent="t") as api:
            with pytest.raises(kubeapi.Unreachable, match="CERTIFICATE_VERIFY_FAILED"):
                await api.request("GET", "/api/v1/nodes/n1")
    assert raw.requests == []
