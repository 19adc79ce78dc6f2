"""Take the README's Models window screenshots: the real window, its Models window against a local
Hub on 127.0.0.1 (the tests' server, serving the tiny reference models and the default model),
light and dark, large and small.

Needs an X display with nothing else on it (`Xvfb :98 -screen 0 1400x900x24 &`, `DISPLAY=:98`) and
ImageMagick's `import`. Uses temporary data/cache folders.

    DISPLAY=:98 python docs/screenshots/take_models.py
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

from shot_helpers import ROOT, open_window, shot, spin, use_temp_dirs

sys.path.insert(0, str(ROOT / "tests"))


def _phi3_file():
    """A small GGUF of an architecture Hearth does not run, for the local list's warning."""
    from hub_fixtures import write_gguf
    return write_gguf(Path(tempfile.mkdtemp(prefix="hearth-shots-phi-")) / "phi-tiny-Q4_0.gguf", arch="phi3",
                      name="phi-tiny")


def repos():
    from hub_server import RepoSpec, file_spec

    from hearth.engine.paths import default_model_path
    tiny = ROOT.parent / "shared" / "reference" / "tiny"
    smol = default_model_path()
    t = {a: tiny / a / f"tiny-{a}.gguf" for a in ("llama", "qwen2", "qwen3", "gemma3")}
    return [
        RepoSpec("hearth-test/SmolLM2-135M-Instruct-GGUF",
                 [file_spec("SmolLM2-135M-Instruct-Q4_1.gguf", smol), file_spec("SmolLM2-135M-Instruct-Q8_0.gguf", t["llama"]),
                  file_spec("SmolLM2-135M-Instruct-IQ2_XS.gguf", t["llama"])],
                 downloads=48_210, likes=131, gguf={"architecture": "llama", "context_length": 8192}),
        RepoSpec("hearth-test/Qwen3-Tiny-GGUF", [file_spec("qwen3-tiny-Q4_K_M.gguf", t["qwen3"])],
                 downloads=12_400, likes=57, gguf={"architecture": "qwen3", "context_length": 40960}),
        RepoSpec("hearth-test/Gemma3-Tiny-GGUF", [file_spec("gemma3-tiny-Q4_0.gguf", t["gemma3"])],
                 gated="manual", downloads=9_870, likes=40, gguf={"architecture": "gemma3"}),
        RepoSpec("hearth-test/Qwen2-Tiny-GGUF", [file_spec("qwen2-tiny-Q5_K_M.gguf", t["qwen2"])],
                 downloads=3_020, likes=8, gguf={"architecture": "qwen2"}),
        RepoSpec("hearth-test/Phi-Tiny-GGUF", [file_spec("phi-tiny-Q4_0.gguf", _phi3_file())],
                 downloads=770, likes=2, gguf={"architecture": "phi3"}),
    ]


@contextlib.contextmanager
def hub_session():
    """(hub, main window, ready): temporary data, cache and Hub-client folders, a local Hub of
    `repos()` on 127.0.0.1 that the window's Models window talks to, and the window with its model
    loaded (`open_window`)."""
    use_temp_dirs()
    os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hearth-shots-hf-")
    os.environ.pop("HF_TOKEN", None)
    from hub_server import LocalHub

    with LocalHub(repos()) as hub:
        os.environ["HF_ENDPOINT"] = hub.endpoint
        main_window, ready = open_window()
        yield hub, main_window, ready


def select_first_file(w) -> None:
    """In Models window `w`'s Hub tab: search "GGUF", select the first repository and its first file."""
    w.hub.query.setText("GGUF")
    w.hub.search()
    spin(lambda: w.hub.repos.rowCount() > 0, 20)
    w.hub.repos.selectRow(0)
    spin(lambda: w.hub.files.rowCount() > 0, 20)
    w.hub.files.selectRow(0)


def main() -> int:
    from hub_server import Fault

    with hub_session() as (hub, main_window, ready):
        for dark, size, name in ((False, (1100, 720), "models-light"), (True, (1100, 720), "models-dark"),
                                 (False, (760, 560), "models-small-light"), (True, (760, 560), "models-small-dark")):
            main_window.set_theme("dark" if dark else "light")
            hub.faults.clear()
            hub.faults["SmolLM2-135M-Instruct-Q4_1.gguf"] = Fault(delay=0.05)
            main_window.modelsButton.click()
            w = main_window.library.window
            w.tabs.setCurrentIndex(0)
            w.resize(*size)
            w.move(0, 0)
            select_first_file(w)
            spin(lambda: "tokens" in (w.hub.files.item(0, 3).toolTip() or ""), 20)
            w.hub.download()
            spin(lambda: any(r.bar.value() > 150 for r in w.downloads.rows.values()), 60)
            shot(name, w)
            w.tasks.downloads.cancel(("hearth-test/SmolLM2-135M-Instruct-GGUF", "SmolLM2-135M-Instruct-Q4_1.gguf"))
            spin(lambda: not w.downloads.rows, 30)
            w.close()
        # Two finished downloads: the local list (one Hearth cannot run), then Use loads the other.
        main_window.set_theme("dark")
        main_window.modelsButton.click()
        w = main_window.library.window
        w.resize(1100, 720)
        w.move(0, 0)
        from hearth.engine.hub import HubClient, job_for
        c = HubClient(hub.endpoint, token="")
        for repo in ("hearth-test/Qwen3-Tiny-GGUF", "hearth-test/Phi-Tiny-GGUF"):
            d = c.repo(repo)
            w.start_download(job_for(d.models[0], repo, d.commit))
        spin(lambda: all(r.state == "done" for r in w.downloads.rows.values()), 60)
        for r in list(w.downloads.rows.values()):
            r.cancel.click()  # "Dismiss"
        w.tabs.setCurrentIndex(1)
        w.local.table.selectRow(next(i for i, m in enumerate(w.local._models) if m.facts.runs is False))
        shot("models-local-dark", w)
        w.local.table.selectRow(next(i for i, m in enumerate(w.local._models) if m.facts.runs is not False))
        w.local.use()
        spin(lambda: len(ready) > 1)
        spin(lambda: not main_window.client.busy)
        w.close()
        main_window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
