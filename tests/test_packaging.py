"""Packaging: the desktop files in resources/, the installed package (`pip install .`), and the
PyInstaller bundle end to end.

The end-to-end tests drive the real window from outside with packaging/hearth_smoke.py
(HEARTH_SMOKE_TEST=1): it types a message into messageInput, clicks sendButton, waits for the reply in
messageView and quits; its events come back as `HEARTH_SMOKE <event> <json>` lines on stdout.

`test_bundle_*` runs `packaging/build --reuse`: a build from these sources is reused, anything else is
rebuilt (a few minutes). The build uses this test run's virtual environment (adding PyInstaller to it)
unless HEARTH_BUILD_VENV names another.
"""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import shutil
import struct
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RES = ROOT / "hearth" / "resources"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BUNDLE = ROOT / "dist" / "hearth"
METAINFO = RES / "io.github.hearth_chat.Hearth.metainfo.xml"
ICON_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
SMOKE_TIMEOUT = 300  # seconds for one start + reply on a loaded 2-core machine (about 20 s when quiet)


# -- desktop files ----------------------------------------------------------------------------------------
def _desktop_entry(path: Path) -> dict[str, str]:
    cp = configparser.RawConfigParser(interpolation=None, delimiters=("=",))
    cp.optionxform = str  # keys are case-sensitive
    cp.read(path, encoding="utf-8")
    return dict(cp["Desktop Entry"])


def test_desktop_entry_runs_the_hearth_command_with_the_hearth_icon():
    d = _desktop_entry(RES / "hearth.desktop")
    assert d["Type"] == "Application"
    assert d["Name"] == "Hearth"
    assert d["Exec"] == "hearth" and "hearth" in PYPROJECT["project"]["scripts"]
    assert d["Icon"] == "hearth"
    assert d["Terminal"] == "false"
    assert (RES / "hearth.svg").is_file()
    for n in ICON_SIZES:
        assert (RES / "icons" / "hicolor" / f"{n}x{n}" / "apps" / "hearth.png").is_file(), n
    # The window names its desktop file (Wayland app id, taskbar grouping): it must be this one.
    assert 'setDesktopFileName("hearth")' in (ROOT / "hearth" / "app" / "main.py").read_text()


@pytest.mark.skipif(not shutil.which("desktop-file-validate"), reason="desktop-file-utils not installed")
def test_desktop_entry_validates():
    r = subprocess.run(["desktop-file-validate", str(RES / "hearth.desktop")], capture_output=True, text=True)
    assert r.returncode == 0 and not r.stdout.strip(), r.stdout + r.stderr


def test_metainfo_names_the_desktop_entry_binary_and_version():
    root = ET.parse(METAINFO).getroot()
    assert root.tag == "component" and root.get("type") == "desktop-application"
    assert METAINFO.name == root.findtext("id") + ".metainfo.xml"
    assert root.find("launchable[@type='desktop-id']").text == "hearth.desktop"
    assert root.findtext("provides/binary") == "hearth"
    assert root.findtext("project_license") == PYPROJECT["project"]["license"]
    assert root.find("releases/release").get("version") == PYPROJECT["project"]["version"]


@pytest.mark.skipif(not shutil.which("appstreamcli"), reason="appstreamcli not installed")
def test_metainfo_validates():
    r = subprocess.run(["appstreamcli", "validate", "--no-net", "--pedantic", str(METAINFO)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def test_png_icons_are_the_svg_rendered_at_each_size():
    for n in ICON_SIZES:
        assert _png_size(RES / "icons" / "hicolor" / f"{n}x{n}" / "apps" / "hearth.png") == (n, n)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run([sys.executable, str(ROOT / "packaging" / "render_icons.py"), "--check"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_resource_file_is_package_data():
    """`pip install .` ships resources/ as package data: a new kind of file there must be declared in
    pyproject.toml, or the installed app silently lacks it."""
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["hearth.resources"]
    assert any(fnmatch.fnmatch("hearth.resources", p) for p in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"])
    files = [p.relative_to(RES).as_posix() for p in RES.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    assert files
    missing = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data] resources: {missing}"


def test_every_package_data_pattern_names_real_files():
    """A pattern that matches nothing declares a file the package does not have."""
    empty = [f"{pkg}: {pat}" for pkg, pats in PYPROJECT["tool"]["setuptools"]["package-data"].items()
             for pat in pats if not list((ROOT / pkg.replace(".", "/")).glob(pat))]
    assert not empty, f"[tool.setuptools.package-data] patterns that match no file: {empty}"


def test_install_desktop_puts_entry_icons_and_metainfo_under_xdg_data_home(tmp_path):
    exe = tmp_path / 'odd "dir" $x' / "hearth"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    data = tmp_path / "share"
    env = {**os.environ, "XDG_DATA_HOME": str(data)}
    r = subprocess.run([str(ROOT / "packaging" / "install-desktop"), str(exe)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    d = _desktop_entry(data / "applications" / "hearth.desktop")
    # Quoted, with " and $ escaped by a backslash and that backslash doubled (string escape level).
    assert d["Exec"] == '"' + str(exe).replace('"', '\\\\"').replace("$", "\\\\$") + '"'
    assert d["Icon"] == "hearth"
    assert (data / "icons" / "hicolor" / "scalable" / "apps" / "hearth.svg").read_bytes() == (RES / "hearth.svg").read_bytes()
    for n in ICON_SIZES:
        assert (data / "icons" / "hicolor" / f"{n}x{n}" / "apps" / "hearth.png").is_file()
    assert (data / "metainfo" / METAINFO.name).is_file()
    if shutil.which("desktop-file-validate"):
        v = subprocess.run(["desktop-file-validate", str(data / "applications" / "hearth.desktop")],
                           capture_output=True, text=True)
        assert v.returncode == 0, v.stdout
    r = subprocess.run([str(ROOT / "packaging" / "install-desktop"), "--uninstall"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not any(p.is_file() for p in data.rglob("*hearth*")), r.stderr
    # A command that does not exist is refused, not written into the menu.
    r = subprocess.run([str(ROOT / "packaging" / "install-desktop"), str(tmp_path / "nothing" / "hearth")],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and not (data / "applications" / "hearth.desktop").exists()


# -- end to end: start, send one message, get a reply, quit ---------------------------------------------------
def run_smoke(cmd: list[str], tmp_path: Path, env: dict[str, str], cwd: Path,
              platform: str = "offscreen") -> tuple[int, dict, str]:
    """Run Hearth with the smoke driver; (exit status, {event: payload}, output)."""
    env = {**env, "HEARTH_SMOKE_TEST": "1", "QT_QPA_PLATFORM": platform,
           "HEARTH_SMOKE_MESSAGE": "Say hello.", "HEARTH_SMOKE_TIMEOUT": str(SMOKE_TIMEOUT - 30),
           "HEARTH_DATA_DIR": str(tmp_path / "data"), "HEARTH_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=SMOKE_TIMEOUT)
    events = {}
    for line in p.stdout.splitlines():
        if line.startswith("HEARTH_SMOKE "):
            _, name, payload = line.split(" ", 2)
            events[name] = json.loads(payload)
    return p.returncode, events, p.stdout + p.stderr


def assert_replied_and_quit(rc: int, ev: dict, out: str) -> None:
    for name in ("window", "sent", "first_token", "reply"):
        assert name in ev, f"no {name!r} event:\n{out[-4000:]}"
    assert ev["reply"]["error"] == "" and ev["reply"]["text"].strip(), ev["reply"]
    assert ev["window"]["t"] <= ev["sent"]["t"] <= ev["first_token"]["t"] <= ev["reply"]["t"]
    assert rc == 0, f"exit status {rc}:\n{out[-4000:]}"
    assert "Traceback" not in out and "Fatal Python error" not in out, out[-4000:]


@pytest.mark.slow
def test_pip_installed_hearth_command_starts_the_window_and_replies(tmp_path):
    """A non-editable install (the wheel `pip install .` builds, into a folder of its own) has the
    shaders, presets, tool sets and icons, and its `hearth` command replies through the window."""
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
                        "--target", str(site), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    for rel in ("hearth/engine/wgsl", "hearth/resources/toolsets"):
        want = sorted(p.name for p in (ROOT / rel).iterdir() if p.is_file())
        assert sorted(p.name for p in (site / rel).iterdir()) == want, rel
    for rel in ("hearth/resources/presets.json", "hearth/resources/hearth.svg", "hearth/resources/hearth.desktop",
                "hearth/resources/icons/hicolor/512x512/apps/hearth.png"):
        assert (site / rel).read_bytes() == (ROOT / rel).read_bytes(), rel
    hearth = site / "bin" / "hearth"
    assert hearth.is_file()
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT / 'packaging' / 'smoke'}"}
    rc, ev, out = run_smoke([str(hearth)], tmp_path, env, cwd=tmp_path)
    assert_replied_and_quit(rc, ev, out)
    assert Path(ev["where"]["app"]) == site / "hearth" / "app", ev["where"]  # the installed copy, not the checkout


def _bundle_env(tmp_path: Path) -> dict[str, str]:
    """A bare environment: nothing of this checkout or its venv, a home of its own."""
    home = tmp_path / "home"
    home.mkdir()
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def _no_network_prefix() -> list[str]:
    """`unshare -n` (a network namespace with no interfaces) where we may: proof of no downloads."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n"]
    return []


@pytest.fixture(scope="module")
def bundle():
    env = dict(os.environ)
    env.setdefault("HEARTH_BUILD_VENV", sys.prefix)
    r = subprocess.run([str(ROOT / "packaging" / "build"), "--reuse"], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    print(r.stdout.strip().splitlines()[-1])  # "build: ... in N s" or "up to date" (pytest -s shows it)
    exe = BUNDLE / "hearth"
    assert exe.is_file() and os.access(exe, os.X_OK)
    return exe


@pytest.mark.slow
def test_bundle_holds_the_model_and_native_libraries(bundle):
    internal = BUNDLE / "_internal"
    from hearth.engine.paths import default_model_path  # noqa: PLC0415
    models = list((internal / "models").glob("*.gguf"))
    assert [m.name for m in models] == [default_model_path().name]
    assert models[0].stat().st_size == default_model_path().stat().st_size
    for pattern in ("wgpu/resources/libwgpu_native*.so", "tokenizers/tokenizers*.so",
                    "PySide6/Qt/plugins/platforms/libqoffscreen.so", "PySide6/Qt/plugins/platforms/libqxcb.so",
                    "PySide6/Qt/plugins/platforms/libqwayland*.so", "PySide6/Qt/plugins/imageformats/libqsvg.so",
                    "hearth/engine/wgsl/*.wgsl", "hearth/engine/quants/tables.npz", "hearth/resources/presets.json",
                    "hearth/resources/toolsets/*.json",
                    "hearth/resources/hearth.svg"):
        assert list(internal.glob(pattern)), pattern


@pytest.mark.slow
def test_bundle_starts_offscreen_replies_and_quits(bundle, tmp_path):
    from hearth.engine.build_info import hash_sources, source_files  # noqa: PLC0415
    rc, ev, out = run_smoke(_no_network_prefix() + [str(bundle)], tmp_path, _bundle_env(tmp_path), cwd=tmp_path)
    assert_replied_and_quit(rc, ev, out)
    internal = BUNDLE / "_internal"
    assert Path(ev["where"]["app"]) == internal / "hearth" / "app", ev["where"]
    # engine.build_info hashes the engine's sources into prefix-image keys: the bundle carries every
    # one of them as a file and hashes those (not only the shaders). Contents are compared with the
    # bundle's own copies, as the checkout may have moved on since the build.
    names = sorted(p.relative_to(ROOT / "hearth" / "engine").as_posix() for p in source_files(ROOT / "hearth" / "engine"))
    assert sorted(p.relative_to(internal / "hearth" / "engine").as_posix() for p in source_files(internal / "hearth" / "engine")) == names
    assert ev["where"]["engine_sources"] == hash_sources(internal / "hearth" / "engine")
    assert "model_ready" in ev and Path(ev["model_ready"]["path"]).parent == internal / "models", ev.get("model_ready")
    assert (tmp_path / "data" / "chats.sqlite3").is_file()  # the chat was kept where HEARTH_DATA_DIR says


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("xvfb-run"), reason="Xvfb not installed")
def test_bundle_replies_on_an_x11_display(bundle, tmp_path):
    """The same through Qt's xcb platform plugin on a virtual X server: the plugin and its X libraries
    load from the bundle (the system provides libxcb-* as for any Qt app; ./dev installs them)."""
    rc, ev, out = run_smoke(["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", str(bundle)], tmp_path,
                            _bundle_env(tmp_path), cwd=tmp_path, platform="xcb")
    assert_replied_and_quit(rc, ev, out)


@pytest.mark.slow
def test_bundle_install_desktop_points_the_menu_entry_at_the_bundle(bundle, tmp_path):
    data = tmp_path / "share"
    r = subprocess.run([str(BUNDLE / "install-desktop")], env={**os.environ, "XDG_DATA_HOME": str(data)},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert _desktop_entry(data / "applications" / "hearth.desktop")["Exec"] == f'"{bundle}"'
    assert (data / "icons" / "hicolor" / "256x256" / "apps" / "hearth.png").is_file()
    assert (data / "metainfo" / METAINFO.name).is_file()
