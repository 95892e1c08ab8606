"""Fetch one pinned pip wheel for the image's build stage and check its SHA-256.

The build stage needs pip only to install the operator into its virtualenv; the base image
need not carry it (a base made from Debian's `python3` has none) and the runtime stage never
does. The wheel comes from the index pip itself would use (`PIP_INDEX_URL`, else PyPI), so a
build against an internal mirror fetches it there too; a TLS-inspecting proxy's CA comes in
through `SSL_CERT_FILE` (the Dockerfile sets it from the build secret). Runs on the base's
Python with the standard library only.

usage: python3 bootstrap_pip.py VERSION SHA256 DEST_DIR   (prints the wheel's path)
"""

import hashlib
import os
import re
import sys
import urllib.parse
import urllib.request


def main(version: str, sha256: str, dest: str) -> str:
    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    page_url = index.rstrip("/") + "/pip/"
    with urllib.request.urlopen(page_url, timeout=120) as page:
        html = page.read().decode()
    name = f"pip-{version}-py3-none-any.whl"
    hrefs = re.findall(r'href="([^"]*/' + re.escape(name) + r'[^"]*)"', html)
    if not hrefs:
        raise SystemExit(f"{page_url} lists no {name}")
    url = urllib.parse.urljoin(page_url, hrefs[0].split("#", 1)[0])
    with urllib.request.urlopen(url, timeout=300) as response:
        data = response.read()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise SystemExit(f"{url}: sha256 {got}, pinned {sha256}")
    path = os.path.join(dest, name)
    with open(path, "wb") as out:
        out.write(data)
    return path


if __name__ == "__main__":
    print(main(*sys.argv[1:4]))
