"""Whether the Hub answers at all, found out within seconds.

huggingface_hub retries a refused connection for about half a minute, and a name lookup without
a network can take tens of seconds, so a Hub operation starts after this probe: any HTTP answer
from the endpoint (whatever its status) within `timeout_s` means the Hub is reachable; an error or
silence means it is not, and the caller says so at once instead of waiting.

    why = hub_unreachable(endpoint, 5.0)    # None, or a sentence for the user
"""

from __future__ import annotations

import threading

import httpx2

NO_HUB = "cannot reach the Hugging Face Hub (no network?)"


def hub_unreachable(endpoint: str, timeout_s: float = 5.0) -> str | None:
    """None when `endpoint` answers an HTTP HEAD within `timeout_s`; else the sentence to show,
    with the cause. The lookup runs on its own daemon thread, so a hung resolver cannot hold the
    caller past `timeout_s` (plus a second)."""
    out: list[str | None] = []

    def probe() -> None:
        try:
            with httpx2.Client(timeout=httpx2.Timeout(timeout_s), follow_redirects=False) as c:
                c.head(endpoint)
            out.append(None)
        except Exception as e:  # noqa: BLE001  every failure to get an answer means the same to the user
            out.append(f"{NO_HUB}: {type(e).__name__}: {e}" if str(e) else f"{NO_HUB}: {type(e).__name__}")

    t = threading.Thread(target=probe, name="hub-probe", daemon=True)
    t.start()
    t.join(timeout_s + 1.0)
    return out[0] if out else f"{NO_HUB}: no answer within {timeout_s:g} s"
