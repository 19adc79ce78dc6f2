"""A model's facts before download: its GGUF header read from the Hub with Range requests.

The header (metadata, the vocabulary, tensor infos) sits at the start of the file and is small
next to the weights: 1-10 MB, mostly the vocabulary. Reading it answers "can Hearth run this"
from the file itself (architecture, every tensor type of a whole file) and gives the KV cache's
dimensions for the memory estimate, before a byte of weights is fetched. Reads grow 1 MB, 4 MB,
16 MB, 64 MB until the header parses (at most four requests); a header larger than that is not
one Hearth can read.
"""

from __future__ import annotations

import httpx2
from huggingface_hub.utils import get_session

from ..errors import GGUFError, HubError
from ..gguf import GGUFFile
from ..library.model_facts import ModelFacts, facts_from_gguf
from .client import HubClient, HubFile, hub_error
from .download import TIMEOUT, _status_error

FIRST_READ = 1 << 20
MAX_HEADER = 64 << 20


def _read_range(client: HubClient, url: str, send_token: bool, start: int, end: int) -> bytes:
    """Bytes [start, end) of the file at `url`."""
    headers = client.download_headers(send_token)
    headers["Range"] = f"bytes={start}-{end - 1}"
    headers["Accept-Encoding"] = "identity"
    out = bytearray()
    with get_session().stream("GET", url, headers=headers, timeout=TIMEOUT, follow_redirects=True) as r:
        if r.status_code >= 400:
            r.read()
            raise hub_error(_status_error(r), url.rsplit("/", 1)[-1].split("?")[0], None, client.token)
        skip = start if r.status_code == 200 else 0  # Range ignored: the file from its first byte
        for chunk in r.iter_bytes(1 << 20):
            if skip:
                cut = min(skip, len(chunk))
                chunk, skip = chunk[cut:], skip - cut
            out += chunk
            if len(out) >= end - start:
                break
    return bytes(out[:end - start])


def remote_facts(client: HubClient, repo_id: str, commit: str, f: HubFile) -> ModelFacts:
    """Facts of the GGUF `f` of `repo_id` at `commit`, from its header only. For a split model,
    pass its first part: it holds all the metadata (tensor types are those of that part)."""
    url, size, send_token = client.file_location(repo_id, f.path, commit)
    total = size or f.size
    data, want = b"", FIRST_READ
    while True:
        want = min(want, total, MAX_HEADER)
        try:
            data += _read_range(client, url, send_token, len(data), want)
        except (httpx2.TransportError, httpx2.StreamError) as e:
            raise HubError("network", f"{f.path}: reading its header failed ({type(e).__name__}: {e})") from e
        try:
            g = GGUFFile.from_header(f.path, data, total)
        except GGUFError as e:
            if len(data) < want or want >= min(total, MAX_HEADER):
                raise HubError("bad_file", f"{f.path}: its GGUF header cannot be read from the first "
                                           f"{len(data) / 1e6:.0f} MB: {e}") from e
            want *= 4
            continue
        return facts_from_gguf(g, split_ok=True)
