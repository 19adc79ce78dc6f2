"""The project's shape: engine/ never imports Qt, neither in its source nor at run time."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "qtpy")


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_engine_source_never_imports_qt():
    offenders = [f"{p.relative_to(ROOT)}: {m}" for p in sorted((ROOT / "hearth" / "engine").rglob("*.py"))
                 for m in _imports(p) if m.split(".")[0] in QT_MODULES]
    assert not offenders, offenders


def test_importing_the_engine_loads_no_qt():
    code = ("import sys, hearth.engine as engine, hearth.engine.gguf, hearth.engine.quants\n"
            "import pkgutil, importlib\n"
            "for m in pkgutil.walk_packages(engine.__path__, 'hearth.engine.'):\n"
            "    if m.name.endswith('__main__'): continue\n"
            "    try: importlib.import_module(m.name)\n"
            "    except Exception: pass\n"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_top_level_layout():
    for name in ("hearth/app", "hearth/engine", "hearth/resources", "tests", "packaging", "pyproject.toml",
                 "README.md", ".ci/run"):
        assert (ROOT / name).exists(), name
    # one installed top-level name: the packages live under hearth/, none beside it
    for name in ("app", "engine", "resources"):
        assert not (ROOT / name).exists(), name


def _app_imports(path: Path):
    """Every module an app file imports, relative imports resolved inside app/."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{a.name}" for a in node.names)


def test_the_app_uses_only_the_servers_public_api():
    """app/ may import `engine.server` and the names it exports, never one of its modules."""
    import pkgutil

    import hearth.engine.server
    submodules = {f"hearth.engine.server.{m.name}" for m in pkgutil.iter_modules(hearth.engine.server.__path__)}
    assert "hearth.engine.server.chat" in submodules            # the check below sees the modules
    offenders = [f"{p.relative_to(ROOT)}: {m}" for p in sorted((ROOT / "hearth" / "app").rglob("*.py"))
                 for m in _app_imports(p) if m in submodules or any(m.startswith(s + ".") for s in submodules)]
    assert not offenders, offenders


def test_the_app_modules_that_say_qt_free_import_no_qt():
    """Every app module whose docstring says "Qt-free" imports, with PySide6 blocked."""
    app = ROOT / "hearth" / "app"
    claims = sorted(".".join(p.relative_to(app).with_suffix("").parts) for p in app.rglob("*.py")
                    if p.name != "__init__.py"
                    and "Qt-free" in (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or ""))
    assert {"store.chat_store", "store.preset_store", "chat_source"} <= set(claims), claims
    code = (f"import sys\nfor m in {QT_MODULES!r}: sys.modules[m] = None\n"
            f"import importlib\nfor m in {claims!r}: importlib.import_module('hearth.app.' + m)\n"
            f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r} and sys.modules[m] is not None]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# The layout a newcomer reads in one look (issue 28): the counts that keep it so.
def _top_modules(folder: str) -> list[str]:
    return sorted(p.name for p in (ROOT / "hearth" / folder).glob("*.py"))


def test_the_app_top_level_holds_at_most_15_modules():
    """What spans subsystems (the window, the worker, the entry point); the rest is in a subsystem."""
    top = _top_modules("app")
    assert len(top) <= 15, top


def test_the_engine_top_level_holds_at_most_16_modules():
    """The engine's API; OS helpers and feature modules are in their packages."""
    top = _top_modules("engine")
    assert len(top) <= 16, top


def test_the_main_window_assembles_and_connects():
    """MainWindow keeps at most 40 methods, none over 80 lines: what a subsystem does lives there."""
    tree = ast.parse((ROOT / "hearth" / "app" / "window.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MainWindow")
    methods = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert len(methods) <= 40, [m.name for m in methods]
    long = [(m.name, m.end_lineno - m.lineno + 1) for m in methods if m.end_lineno - m.lineno + 1 > 80]
    assert not long, long


def test_nothing_reaches_into_another_objects_private_state():
    """No noqa for SLF (private member access) anywhere: what one module needs of another is its public API."""
    offenders = [f"{p.relative_to(ROOT)}:{i}" for folder in ("hearth", "tests", "bench")
                 for p in sorted((ROOT / folder).rglob("*.py"))
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if "noqa: SLF" + "001" in line]
    assert not offenders, offenders


def test_the_benchmark_page_is_a_page_of_current_figures():
    n = len((ROOT / "bench" / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 500, f"bench/README.md has {n} lines; history belongs in git"
