"""The remote chat client: any OpenAI-compatible server (vLLM, llama.cpp's llama-server, Ollama,
LM Studio, Hearth's own `python -m hearth.engine serve`), driven like the local Engine.

    client = RemoteClient("http://127.0.0.1:8080", api_key=None)
    models = client.models()                                  # GET /v1/models
    stream = client.chat(messages, model=models[0].id, tools=preset_tools,
                         sampling=Sampling(temperature=0), max_tokens=256, cancel=stop_event)
    for ev in stream:                                         # the same shape as Engine.generate
        ev.text                                               # a text delta (may be empty)
        if ev.final: ev.stop_reason, ev.stats, ev.tool_calls  # "eog" | "length" | "tool_calls" | "cancelled"
    stream.close()                                            # Stop, from any thread: closes the connection

Events are `RemoteEvent`s (a GenerationEvent plus `tool_calls`: engine.tools ToolCall or
MalformedToolCall objects, so `messages_with_tool_round` continues the chat as for the local engine);
`stats` is a `RemoteStats` (a GenerationStats plus the server's usage). Messages may be in the
template shapes engine.tools uses (a call's arguments as a dict); they are sent in the wire shapes.

Everything that goes wrong is a `RemoteError` (an EngineError) with a sentence for the user naming
the server: `RemoteConnectionError` (cannot connect; the connection dropped, or the stream ended,
before the reply was complete), `RemoteTimeout`, `RemoteHTTPError` (4xx/5xx or an error event, with
the server's own message; `RemoteAuthError` for 401/403), `RemoteProtocolError` (not JSON, not an
event stream, not the OpenAI shapes).

Modules: client (RemoteClient, ChatStream: httpx, one connection per reply), stream (server-sent
events -> RemoteEvents), events (RemoteEvent, RemoteStats, tool calls), errors.
"""

from .client import ChatStream, RemoteClient, normalize_base_url, sampling_fields, wire_messages
from .errors import (RemoteAuthError, RemoteConnectionError, RemoteError, RemoteHTTPError, RemoteProtocolError,
                     RemoteTimeout, error_detail)
from .events import RemoteEvent, RemoteModel, RemoteStats, tool_calls_from_wire

__all__ = ["ChatStream", "RemoteAuthError", "RemoteClient", "RemoteConnectionError", "RemoteError", "RemoteEvent",
           "RemoteHTTPError", "RemoteModel", "RemoteProtocolError", "RemoteStats", "RemoteTimeout", "error_detail",
           "normalize_base_url", "sampling_fields", "tool_calls_from_wire", "wire_messages"]
