"""`python -m hearth.engine serve` (or `python -m hearth.engine.server`): Hearth's engine as an OpenAI-compatible server.

    python -m hearth.engine serve                         127.0.0.1:8080, the default model, CPU
    python -m hearth.engine serve --port 0                a free port (printed)
    python -m hearth.engine serve --host 0.0.0.0 --token SECRET    other machines, with an API key

It listens on loopback unless `--host` names another address, and then only with a token
(`--token` or the HEARTH_SERVER_TOKEN environment variable, which keeps it out of `ps`).
The first line on stdout is `Hearth server on http://HOST:PORT/v1 (model ID)` once it accepts requests.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from ..errors import EngineError
from .http import HearthServer, is_loopback

TOKEN_ENV = "HEARTH_SERVER_TOKEN"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m hearth.engine serve",
                                 description="Serve a GGUF model over the OpenAI chat-completions API.")
    ap.add_argument("--model", "-m", help="GGUF file (default: the bundled SmolLM2-135M-Instruct)")
    ap.add_argument("--backend", choices=["cpu", "gpu", "auto"], default="cpu")
    ap.add_argument("--ctx", type=int, default=4096, help="context size in tokens (default 4096)")
    ap.add_argument("--kv-dtype", choices=["f32", "f16"], default="f32",
                    help="KV cache precision: f32 (default) or f16 (half the memory and image bytes)")
    ap.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1; any other needs --token)")
    ap.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 = any free port)")
    ap.add_argument("--token", default=None, help=f"API key clients must send as a Bearer token "
                    f"(default: ${TOKEN_ENV})")
    ap.add_argument("--model-id", default=None, help="the model's name in /v1/models (default: the file name)")
    ap.add_argument("--presets", default=None, help="the app's presets file, whose prefixes are kept as "
                    "images (default: the app's presets.json if there is one)")
    ap.add_argument("--no-presets", action="store_true", help="do not use saved presets' prefix images")
    ap.add_argument("--verbose", "-v", action="store_true", help="log every request")
    return ap.parse_args(argv)


def check_listen(host: str, token: str | None) -> str | None:
    """Why the server must not start with these settings, or None."""
    if not is_loopback(host) and not token:
        return (f"refusing to listen on {host} without a token: anyone who can reach this machine could "
                f"use it. Pass --token SECRET (or set {TOKEN_ENV}), or leave --host at 127.0.0.1")
    return None


def presets_path(a) -> Path | None:
    if a.no_presets:
        return None
    if a.presets:
        return Path(a.presets)
    from ..paths import data_dir  # noqa: PLC0415
    p = data_dir() / "presets.json"
    return p if p.is_file() else None


def main(argv=None) -> int:
    a = parse_args(argv)
    token = a.token or os.environ.get(TOKEN_ENV) or None
    why = check_listen(a.host, token)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(message)s")
    from .. import Engine  # noqa: PLC0415
    from .chat import ChatService  # noqa: PLC0415
    from .presets import PresetPrefixes  # noqa: PLC0415
    try:
        engine = Engine.load(a.model, backend=a.backend, n_ctx=a.ctx, kv_dtype=a.kv_dtype)
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    pp = presets_path(a)
    from ..prefix import PrefixStore  # noqa: PLC0415
    from ..prefix.chat_images import ChatImages  # noqa: PLC0415
    store = PrefixStore()   # one cache folder for preset images and chat segments, as the app's
    presets = PresetPrefixes(pp, store) if pp else None
    service = ChatService(engine, a.model_id, presets, chat_images=ChatImages(store))
    try:
        server = HearthServer(service, a.host, a.port, token)
    except OSError as e:
        print(f"error: cannot listen on {a.host}:{a.port} ({e.strerror or e})", file=sys.stderr)
        service.close()
        return 1
    print(f"Hearth server on {server.url} (model {service.model_id})", flush=True)
    if pp:
        print(f"preset prefixes from {pp}", file=sys.stderr, flush=True)
    stop = threading.Event()

    def _quit(*_):
        if not stop.is_set():
            stop.set()
            threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _quit)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        service.close()
        engine.close()
    return 0
