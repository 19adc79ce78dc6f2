"""Hearth's engine behind the OpenAI chat-completions API (issue 9): `python -m engine serve`.

    service = ChatService(engine)                      # one worker thread owns the engine
    server = HearthServer(service, "127.0.0.1", 0)     # port 0: any free port; server.url
    server.serve_forever()

Modules: protocol (the wire format, no I/O), worker (the serial engine thread), chat (requests on
the engine: prompt, presets' prefixes, tool calls), presets (saved presets' prefix images),
http (routes, SSE, disconnects, errors), cli (the command line).
"""

from .chat import ChatService
from .http import HearthServer
from .protocol import RequestError

__all__ = ["ChatService", "HearthServer", "RequestError"]
