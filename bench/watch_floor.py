"""The floors of bench/agent_cost.py: a process that holds one Node watch and nothing else.

    python bench/watch_floor.py stdlib|aiohttp server=URL node=NAME ca=FILE
                                [token=FILE] [cert=FILE key=FILE]

Both list the Node (field selector `metadata.name=NAME`), then watch it from the listing's
resourceVersion with bookmarks, resume from the last version when the apiserver ends the watch,
list again on an ERROR event (410), and reconnect after a second on a connection error: what the
agent's `kubeapi.list_watch` does for its own Node, without anything else. `stdlib` uses
`http.client` and `ssl` only (no third-party import at all); `aiohttp` one `ClientSession`. Each
prints `watching` once its first watch is open. Arguments are `key=value` words, not argparse,
so that the standard-library floor imports only what the watch needs (not even `typing`).
"""

from __future__ import annotations

import json
import ssl
import sys
import time
from urllib.parse import urlencode, urlsplit

WATCH_SECONDS = 300


def settings(words: list[str]) -> dict[str, str]:
    return dict(w.split("=", 1) for w in words)


def tls(conf: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=conf["ca"])
    if conf.get("cert"):
        context.load_cert_chain(conf["cert"], conf["key"])
    return context


def headers(conf: dict[str, str]) -> dict[str, str]:
    if not conf.get("token"):
        return {}
    with open(conf["token"]) as f:
        return {"Authorization": f"Bearer {f.read().strip()}"}


def queries(conf: dict[str, str], rv: str | None) -> str:
    query: dict[str, str] = {"fieldSelector": f"metadata.name={conf['node']}"}
    if rv is not None:
        query.update(
            watch="true",
            resourceVersion=rv,
            allowWatchBookmarks="true",
            timeoutSeconds=str(WATCH_SECONDS),
        )
    return "/api/v1/nodes?" + urlencode(query)


def announce(state: dict[str, bool]) -> None:
    if not state.get("announced"):
        print("watching", flush=True)
        state["announced"] = True


def follow(event: dict, rv: str | None) -> str | None:  # type: ignore[type-arg]
    """The version to resume from after `event` (None: list again)."""
    if event.get("type") == "ERROR":
        return None
    return str(event["object"]["metadata"]["resourceVersion"])


def stdlib_floor(conf: dict[str, str]) -> None:
    from http.client import HTTPSConnection

    url = urlsplit(conf["server"])
    context, auth, state = tls(conf), headers(conf), {}
    rv: str | None = None
    while True:
        conn = HTTPSConnection(url.hostname or "", url.port or 443, context=context)
        try:
            if rv is None:
                conn.request("GET", queries(conf, None), headers=auth)
                rv = str(json.loads(conn.getresponse().read())["metadata"]["resourceVersion"])
            conn.request("GET", queries(conf, rv), headers=auth)
            response = conn.getresponse()
            if response.status != 200:
                response.read()
                rv = None
                time.sleep(1)
                continue
            announce(state)
            while line := response.readline():
                rv = follow(json.loads(line), rv)
                if rv is None:
                    break
        except OSError:
            time.sleep(1)
        finally:
            conn.close()


async def aiohttp_floor(conf: dict[str, str]) -> None:
    import asyncio

    import aiohttp

    context, state = tls(conf), {}
    base = conf["server"].rstrip("/")
    rv: str | None = None
    no_timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    async with aiohttp.ClientSession(headers=headers(conf), timeout=no_timeout) as session:
        while True:
            try:
                if rv is None:
                    async with session.get(base + queries(conf, None), ssl=context) as r:
                        rv = str((await r.json())["metadata"]["resourceVersion"])
                async with session.get(base + queries(conf, rv), ssl=context) as r:
                    if r.status != 200:
                        rv = None
                        await asyncio.sleep(1)
                        continue
                    announce(state)
                    async for line in r.content:
                        rv = follow(json.loads(line), rv)
                        if rv is None:
                            break
            except (OSError, aiohttp.ClientError):
                await asyncio.sleep(1)


def main(argv: list[str]) -> None:
    kind, conf = argv[0], settings(argv[1:])
    if kind == "stdlib":
        stdlib_floor(conf)
    elif kind == "aiohttp":
        import asyncio

        asyncio.run(aiohttp_floor(conf))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} stdlib|aiohttp server=URL node=NAME ca=FILE ...")


if __name__ == "__main__":
    main(sys.argv[1:])
