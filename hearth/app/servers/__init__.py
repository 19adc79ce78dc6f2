"""Remote servers and the local server: an OpenAI-compatible server as a chat source, and Hearth
serving its own model on 127.0.0.1.

Owns: `remote_ui.RemoteUI` (the picker's remembered servers, "Remote server…"), `remote_dialog`,
`remote_servers` (remembered servers and their API keys), `remote_source` (RemoteBackend and
RoutingBackend behind the app's ChatBackend), `server_toggle.ServeToggle` (Settings → Serve).

Signals: RemoteUI.loadRequested(str), notice(str); RemoteDialog.modelChosen(str, str, str);
ServeToggle.servingChanged(str), problem(str).

May import: the top-level `chat_source` (ChatBackend), `store/settings`; from the engine
`engine/remote/` and `engine.server`'s exported names only (tests/test_layout.py checks).
"""
