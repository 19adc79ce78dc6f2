"""engine/server/cli.py: `python -m hearth.engine serve` as a user starts it: loopback by default, another
address only with a token, the address printed once it serves, SIGTERM ends it cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hearth.engine.server.cli import check_listen, parse_args, presets_path

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_are_loopback_port_8080_and_no_token():
    a = parse_args([])
    assert (a.host, a.port, a.token, a.backend, a.ctx) == ("127.0.0.1", 8080, None, "cpu", 4096)


@pytest.mark.parametrize("host, token, ok", [
    ("127.0.0.1", None, True), ("localhost", None, True), ("::1", None, True), ("127.0.0.2", None, True),
    ("0.0.0.0", None, False), ("192.168.1.5", None, False), ("::", None, False), ("0.0.0.0", "s3cret", True),
    # names are judged by what they resolve to, not by their spelling
    ("127.evil.example", None, False), ("127.0.0.1.nip.example", None, False), ("::ffff:127.0.0.1", None, True),
    ("2130706433", None, True), ("", None, False),
])
def test_only_loopback_without_a_token(host, token, ok):
    why = check_listen(host, token)
    assert (why is None) == ok
    if not ok:
        assert f"refusing to listen on {host} without a token" in why and "--token" in why


def test_refuses_to_start_on_all_interfaces_without_a_token():
    env = {k: v for k, v in os.environ.items() if k != "HEARTH_SERVER_TOKEN"}
    r = subprocess.run([sys.executable, "-m", "hearth.engine", "serve", "--host", "0.0.0.0", "--port", "0"], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "refusing to listen on 0.0.0.0 without a token" in r.stderr and not r.stdout


def test_presets_file_default_is_the_apps(tmp_path, monkeypatch):
    monkeypatch.setenv("HEARTH_DATA_DIR", str(tmp_path))
    assert presets_path(parse_args([])) is None                      # the app never saved any
    (tmp_path / "presets.json").write_text(json.dumps({"format": "hearth-presets", "version": 1, "presets": []}))
    assert presets_path(parse_args([])) == tmp_path / "presets.json"
    assert presets_path(parse_args(["--no-presets"])) is None
    assert presets_path(parse_args(["--presets", "x.json"])) == Path("x.json")


@pytest.mark.slow
def test_kv_dtype_option_loads_a_float16_cache(tmp_path):
    assert parse_args([]).kv_dtype == "f32" and parse_args(["--kv-dtype", "f16"]).kv_dtype == "f16"
    env = dict(os.environ, PYTHONUNBUFFERED="1", HEARTH_CACHE_DIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "hearth.engine", "serve", "--port", "0", "--ctx", "256",
                             "--kv-dtype", "f16", "--no-presets"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().split()[3]
        model = httpx.get(f"{url}/models").json()["data"][0]
        assert model["kv_dtype"] == "f16" and model["n_ctx"] == 256
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait(30)


def test_serves_with_a_token_and_ends_on_sigterm():
    env = dict(os.environ, PYTHONUNBUFFERED="1", HEARTH_SERVER_TOKEN="s3cret")
    proc = subprocess.Popen([sys.executable, "-m", "hearth.engine", "serve", "--port", "0", "--ctx", "256",
                             "--model-id", "smol"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("Hearth server on http://127.0.0.1:") and line.rstrip().endswith("(model smol)"), line
        url = line.split()[3]
        assert httpx.get(f"{url}/models").status_code == 401
        r = httpx.get(f"{url}/models", headers={"Authorization": "Bearer s3cret"})
        assert [m["id"] for m in r.json()["data"]] == ["smol"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait(30)
