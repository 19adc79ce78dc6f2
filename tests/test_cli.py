"""`python -m hearth.engine`: one-shot, interactive, --info, errors (run as real subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def engine_cli(*args, stdin=None, timeout=300):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "hearth.engine", *args], cwd=ROOT, input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


# "Name the capital of France." and not "What is the capital of France?": asked the latter, the
# model's first token is a near tie ("The" 0.08-0.13 above "L" here; llama.cpp picks "L" and
# answers "L'Étoile, la Marseillaise", no Paris), so the reply hung on last-bit rounding. Asked
# this way, the greedy reply's smallest top-2 gap is 1.35-1.66 on both of Hearth's paths and on
# llama.cpp (bench/README.md, 8-bit activations in decode).
def test_one_shot_streams_reply_and_speed_line():
    r = engine_cli("-p", "Name the capital of France.", "--temp", "0", "-n", "20", "--ctx", "256")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert "prefill" in last and "decode" in last and "tok/s" in last


def test_interactive_chat_keeps_the_conversation():
    r = engine_cli("--temp", "0", "-n", "20", "--ctx", "512", "--system", "You are terse.",
                   stdin="Name the capital of France.\nAnd of Italy?\n/quit\n")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout and "Rome" in r.stdout
    lines = [x for x in r.stderr.splitlines() if "tok/s" in x]
    assert len(lines) == 2
    assert "(reused 0)" not in lines[1]  # the second turn reuses the first


def test_info_prints_metadata_and_a_tokenization():
    r = engine_cli("--info", "--ctx", "64")
    assert r.returncode == 0, r.stderr
    assert "architecture: llama" in r.stdout and "llama.block_count = 30" in r.stdout
    assert "sample:" in r.stdout and "round trip: True" in r.stdout


def test_missing_model_is_a_clear_error(tmp_path):
    r = engine_cli("--model", str(tmp_path / "missing.gguf"), "-p", "hi")
    assert r.returncode == 1 and "error:" in r.stderr and "missing.gguf" in r.stderr
