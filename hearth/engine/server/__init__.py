"""Hearth's engine behind the OpenAI chat-completions API: `python -m hearth.engine serve`.

    service = ChatService(engine)                      # one worker thread owns the engine
    server = HearthServer(service, "127.0.0.1", 0)     # port 0: any free port; server.url
    server.serve_forever()

Modules: protocol (the wire format, no I/O), worker (the serial engine thread), chat (requests on
the engine: prompt, presets' prefixes, tool calls), presets (saved presets' prefix images),
http (routes, SSE, disconnects, errors), cli (the command line).

The package's public API is what it exports here; the app uses only these names:

    ChatService, HearthServer, RequestError        the service, the HTTP server, a request's error
    Job                                            a unit of work for a caller-provided worker
    PresetPrefixes                                 saved presets' prefixes, from a presets file
"""

from .chat import ChatService
from .http import HearthServer
from .presets import PresetPrefixes
from .protocol import RequestError
from .worker import Job

__all__ = ["ChatService", "HearthServer", "Job", "PresetPrefixes", "RequestError"]
