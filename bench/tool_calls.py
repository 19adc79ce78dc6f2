"""How often the default model calls a tool when it should: `python -m bench.tool_calls`.

Ten simple questions, each answerable with one of the built-in tools (calculator, convert_units,
current_datetime), asked greedily (temperature 0) with the tools in the prompt: through the
template's own tool support when it has one, else through `fallback_system_prompt` (SmolLM2's
template has none, so the generic format is used); the prompt is built as the app builds it
(engine/chat/chat_turn.render_prompt). The reply is parsed with the streaming parser
as it arrives, and counted as

- parseable: it holds at least one ToolCall (valid JSON, a known tool, arguments passing the schema);
- malformed: it attempted a call that the parser reports as MalformedToolCall;
- right: its first call names the expected tool with arguments that mean the expected thing
  (an expression evaluating to the answer, the same units after normalisation, the time zone).

`--force-prefix TEXT` starts every reply with TEXT (e.g. '<tool_call>['), as an app's "the reply must
be a tool call" mode would: the model continues from there, and the parser reads TEXT first.
`--record PATH` writes every prompt and raw reply to JSON (tests replay them through the parser).
`--set chain` asks the ten two-tool questions of bench/tool_chains.py instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hearth.engine import Engine, Sampling
from hearth.engine.chat.chat_turn import ChatTurn, render_prompt
from hearth.engine.tools import (MalformedToolCall, ToolCall, ToolCallParser, ToolRegistry, UnitError,
                          detect_format, evaluate)
from hearth.engine.tools.units import find_unit

SYSTEM = "You are a helpful assistant."


def prompt_text(eng: Engine, messages: list[dict], registry: ToolRegistry, fmt: str) -> str:
    """The prompt the app and the server build for these messages and tools (chat_turn's rule: a
    generic template gets the tools described in the system prompt and earlier calls as text)."""
    return render_prompt(eng, ChatTurn(messages, registry.definitions()), fmt)[0]


def _calc(expected):
    def check(args):
        try:
            return abs(float(evaluate(args["expression"])) - expected) < 1e-6 * max(1, abs(expected))
        except Exception:
            return False
    return "calculator", check


def _units(value, a, b):
    def check(args):
        try:
            return (abs(args["value"] - value) < 1e-9 and find_unit(args["from_unit"]) == find_unit(a)
                    and find_unit(args["to_unit"]) == find_unit(b))
        except (UnitError, KeyError, TypeError):
            return False
    return "convert_units", check


def _clock(zone):
    return "current_datetime", lambda args: args.get("timezone") == zone


PROMPTS = [
    ("What is 23*47?", _calc(1081)),
    ("What is the square root of 1764?", _calc(42)),
    ("Calculate 2 to the power of 16.", _calc(65536)),
    ("What is 15% of 240?", _calc(36)),
    ("What is (17 + 5) * 3?", _calc(66)),
    ("What is 1234 divided by 2?", _calc(617)),
    ("Convert 5 miles to kilometers.", _units(5, "mi", "km")),
    ("Convert 100 degrees Fahrenheit to Celsius.", _units(100, "F", "C")),
    ("How many grams are in 3.5 pounds?", _units(3.5, "lb", "g")),
    ("What time is it in Tokyo right now?", _clock("Asia/Tokyo")),
]


def run(eng: Engine, max_tokens: int, force_prefix: str = "", system: str = SYSTEM) -> tuple[list[dict], str]:
    registry = ToolRegistry.builtin()
    source = eng.gguf.metadata.get("tokenizer.chat_template")
    fmt = detect_format(source if isinstance(source, str) else None)
    rows = []
    for question, (tool, check) in PROMPTS:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        prompt = prompt_text(eng, messages, registry, fmt) + force_prefix
        parser = ToolCallParser(fmt, registry)
        events, reply = parser.feed(force_prefix), ""
        t0 = time.perf_counter()
        for ev in eng.generate(prompt, max_tokens=max_tokens, sampling=Sampling(temperature=0)):
            reply += ev.text
            events += parser.feed(ev.text)
        events += parser.finish()
        calls = [e for e in events if isinstance(e, ToolCall)]
        bad = [e for e in events if isinstance(e, MalformedToolCall)]
        first = calls[0] if calls else None
        rows.append({
            "prompt": question, "reply": reply, "seconds": round(time.perf_counter() - t0, 1),
            "parseable": bool(calls), "malformed": [m.error for m in bad],
            "call": {"name": first.name, "arguments": first.arguments} if first else None,
            "expected_tool": tool,
            "right_tool": bool(first and first.name == tool),
            "right_args": bool(first and first.name == tool and check(first.arguments)),
        })
        print(f"  {question!r}: {'call' if calls else 'malformed' if bad else 'no call'} "
              f"({rows[-1]['seconds']} s)", flush=True)
    return rows, fmt


def table(rows: list[dict]) -> str:
    lines = ["| prompt | reply (start) | parseable call | right tool | right args |",
             "|---|---|---|---|---|"]
    for r in rows:
        reply = " ".join(r["reply"].split())[:70].replace("|", "\\|").replace("<", "&lt;")
        status = "yes" if r["parseable"] else ("malformed" if r["malformed"] else "no")
        lines.append(f"| {r['prompt']} | {reply} | {status} | {'yes' if r['right_tool'] else 'no'} | "
                     f"{'yes' if r['right_args'] else 'no'} |")
    n = len(rows)
    lines.append(f"| **total** | | **{sum(r['parseable'] for r in rows)}/{n}** "
                 f"({sum(bool(r['malformed']) for r in rows)} malformed) | "
                 f"**{sum(r['right_tool'] for r in rows)}/{n}** | **{sum(r['right_args'] for r in rows)}/{n}** |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a .gguf file (default: the default model)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--force-prefix", default="", help="start every reply with this text")
    ap.add_argument("--record", type=Path, default=None, help="write prompts and replies to this JSON file")
    ap.add_argument("--system", default=SYSTEM, help=f"the system prompt (default: {SYSTEM!r})")
    ap.add_argument("--set", choices=("one", "chain"), default="one",
                    help="one: ten one-tool questions; chain: ten that need two tools in a row")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    eng = Engine.load(args.model)
    print(f"model: {eng.gguf.metadata.get('general.name', args.model)}, loaded in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    if args.set == "chain":
        from .tool_chains import chain_table, run_chains  # noqa: PLC0415
        source = eng.gguf.metadata.get("tokenizer.chat_template")
        fmt = detect_format(source if isinstance(source, str) else None)
        rows = run_chains(eng, fmt, args.max_tokens, args.system)
        print(f"\ntool-call format: {fmt}; greedy, at most {args.max_tokens} tokens per reply\n")
        print(chain_table(rows))
    else:
        rows, fmt = run(eng, args.max_tokens, args.force_prefix, args.system)
        forced = f", every reply started with {args.force_prefix!r}" if args.force_prefix else ""
        print(f"\ntool-call format: {fmt}; greedy, at most {args.max_tokens} tokens per reply{forced}\n")
        print(table(rows))
    if args.record:
        args.record.write_text(json.dumps({"model": str(eng.gguf.metadata.get("general.name")),
                                           "format": fmt, "max_tokens": args.max_tokens,
                                           "forced_prefix": args.force_prefix, "set": args.set, "system": args.system,
                                           "rows": rows},
                                          indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
