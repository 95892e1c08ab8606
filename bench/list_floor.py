"""The floor of bench/doctor_scale.py: a process that sends the reads `doctor` sends, and nothing
else: each list page by page (`limit`, `continue`), each GET once, all at once over one aiohttp
session with as many connections as doctor's client (8), every body parsed (`json.loads`) and
dropped. No kubernetes-asyncio, no pydantic, no rules: what listing the same objects costs.

    python bench/list_floor.py server=URL ca=FILE cert=FILE key=FILE requests=FILE

`requests` is a JSON file: {"lists": [[path, {query}], ...], "gets": [path, ...]}; a list's
query has its `limit` (bench/doctor_scale.py writes doctor's page size there). A GET or a list
answered 404 counts (doctor reads the named objects that way too, and lists the ResourceClaims
where the cluster serves them); any other error ends the process with status 1. It prints one
JSON line: the items each list returned, the GETs found, the pages, and the seconds from its
first request to its last answer.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import time
from typing import Any

import aiohttp

CONNECTIONS = 8  # doctor's client: `client(pool_size=8)` in commands/doctor.py


def settings(words: list[str]) -> dict[str, str]:
    return dict(w.split("=", 1) for w in words)


async def list_pages(
    session: aiohttp.ClientSession, base: str, path: str, query: dict[str, str]
) -> tuple[int, int]:
    """(items, pages) of one list, page by page."""
    items = pages = 0
    params = dict(query)
    while True:
        async with session.get(base + path, params=params) as r:
            body = await r.read()
            if r.status == 404:  # a kind the cluster does not serve: doctor reads none either
                return items, pages + 1
            if r.status != 200:
                raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
        listing = json.loads(body)
        items += len(listing.get("items") or [])
        pages += 1
        token = (listing.get("metadata") or {}).get("continue")
        if not token:
            return items, pages
        params = {**params, "continue": token}


async def get(session: aiohttp.ClientSession, base: str, path: str) -> bool:
    """Whether the object exists (404: it does not)."""
    async with session.get(base + path) as r:
        body = await r.read()
        if r.status == 404:
            return False
        if r.status != 200:
            raise RuntimeError(f"GET {path}: {r.status} {body[:200]!r}")
    json.loads(body)
    return True


async def floor(conf: dict[str, str]) -> dict[str, Any]:
    with open(conf["requests"]) as f:
        wanted = json.load(f)
    context = ssl.create_default_context(cafile=conf["ca"])
    context.load_cert_chain(conf["cert"], conf["key"])
    base = conf["server"].rstrip("/")
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        began = time.perf_counter()
        lists, found = await asyncio.gather(
            asyncio.gather(
                *(list_pages(session, base, path, query) for path, query in wanted["lists"])
            ),
            asyncio.gather(*(get(session, base, path) for path in wanted["gets"])),
        )
        seconds = time.perf_counter() - began
    return {
        "items": {
            path: items for (path, _), (items, _) in zip(wanted["lists"], lists, strict=True)
        },
        "pages": sum(pages for _, pages in lists),
        "gets": len(found),
        "found": sum(found),
        "seconds": seconds,
    }


def main(argv: list[str]) -> None:
    conf = settings(argv)
    try:
        result = asyncio.run(floor(conf))
    except (RuntimeError, OSError, aiohttp.ClientError) as exc:
        print(f"list_floor: {exc}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
