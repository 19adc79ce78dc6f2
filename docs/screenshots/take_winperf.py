"""Screenshots of issue 33's window fixes, at 760x520 and 1920x1080 in both themes: the Models
window's Hub tab (a file's header being read, a long "Can run" reason cut), its "On this computer"
tab with the default model, the Hub tab without a Hub ("cannot reach…"), and the preset editor's
MCP servers with their tools.

    xvfb-run -s "-screen 0 1920x1080x24" python docs/screenshots/take_winperf.py
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from pathlib import Path

from shot_helpers import HERE, ROOT, spin, use_temp_dirs

sys.path.insert(0, str(ROOT / "tests"))
SIZES = {"small": (760, 520), "large": (1920, 1080)}


def save(widget, name: str) -> None:
    spin(seconds=0.5)
    widget.grab().save(str(HERE / f"{name}.png"))
    print("wrote", name)


def mcp_servers(tmp: Path):
    """The user's MCP servers with the test server's tools as it listed them."""
    from mcp_fixtures import stdio_config

    from hearth.app.tools.mcp_servers import McpServers
    from hearth.app.store.settings import Settings
    from hearth.engine.tools.mcp import McpManager
    servers = McpServers(Settings())
    cfg = stdio_config("calc", tmp)
    servers.add(cfg)
    m = McpManager(tmp / "logs")
    servers.remember_tools("calc", m.start(cfg).result(60))
    m.close()
    from hearth.engine.tools.mcp import McpServerConfig
    servers.add(McpServerConfig("files", "npx", ("-y", "server-files", "/home/me/notes")))
    return servers


def main() -> int:
    tmp = use_temp_dirs()
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hearth-shots-hf-")
    from hub_server import LocalHub
    from PySide6.QtWidgets import QApplication
    from take_models import repos

    from hearth.app import theme
    from hearth.app.library.models_ui import _built_in
    from hearth.app.library.models_window import ModelsWindow
    from hearth.app.presets.preset_manager import PresetManager
    from hearth.app.store.preset_store import PresetStore
    from hearth.engine.library.registry import ModelRegistry

    app = QApplication(sys.argv[:1])
    reg = ModelRegistry()
    reg.set_models_dir(tmp / "models")
    servers = mcp_servers(tmp)
    store = PresetStore(tmp / "presets.json")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    dead = f"http://127.0.0.1:{s.getsockname()[1]}"      # takes connections, never answers
    with LocalHub(repos()) as hub:
        for dark in (False, True):
            theme.apply(app, "dark" if dark else "light")
            t = "dark" if dark else "light"
            for size_name, size in SIZES.items():
                w = ModelsWindow(reg, endpoint=hub.endpoint, available=8 << 30, built_in=_built_in())
                w.resize(*size)
                w.show()
                w.hub.query.setText("GGUF")
                w.hub.search()
                spin(lambda: w.hub.repos.rowCount() > 0, 20)
                w.hub.repos.selectRow(0)
                spin(lambda: w.hub.files.rowCount() > 0, 20)
                w.hub.files.selectRow(2)
                save(w, f"issue33-models-hub-{t}-{size_name}")
                w.tabs.setCurrentIndex(1)
                w.local.table.selectRow(0)
                save(w, f"issue33-models-local-{t}-{size_name}")
                w.shutdown()
                w.close()
                off = ModelsWindow(reg, endpoint=dead, available=8 << 30)
                off.resize(*size)
                off.show()
                off.hub.query.setText("qwen")
                off.hub.search()
                save(off, f"issue33-hub-searching-{t}-{size_name}")
                spin(lambda: "no network?" in off.hub.status.text(), 15)
                save(off, f"issue33-hub-offline-{t}-{size_name}")
                off.shutdown()
                off.close()
                dlg = PresetManager(store, None, mcp=servers)
                dlg.select(store.presets[0].id)
                dlg.mcpServers.set_checked("calc", True)
                dlg.resize(*size)
                dlg.show()
                save(dlg, f"issue33-preset-mcp-tools-{t}-{size_name}")
                dlg.done(0)
    s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
