"""Ten questions that need two tools in a row, the first one's result feeding the second
(`python -m bench.tool_calls --set chain`).

Each question is asked greedily with the built-in tools. The first reply's calls are run and their
results fed back (`messages_with_tool_round`, rendered by chat_turn.render_prompt, as the app does),
then the model replies again. The
second call is the first call of that second reply, or the second call of the first reply when
the model wrote both at once. Counted as right when the first call has the right tool and
arguments and the second call has the right tool and arguments computed from the first result
(the model may round what it copies: 0.1% is allowed).
"""

from __future__ import annotations

import time

from hearth.engine import Sampling
from hearth.engine.tools import (MalformedToolCall, ToolCall, ToolCallParser, ToolContext, ToolRegistry,
                                 UnitError, evaluate, messages_with_tool_round)
from hearth.engine.tools.units import find_unit

from .tool_calls import prompt_text

SYSTEM = "You are a helpful assistant."


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-3 * max(1.0, abs(b))


def calc(expected):
    def check(args):
        try:
            return _close(float(evaluate(args["expression"])), expected)
        except Exception:
            return False
    return "calculator", check


def units(value, a, b):
    def check(args):
        try:
            return (_close(float(args["value"]), value) and find_unit(args["from_unit"]) == find_unit(a)
                    and find_unit(args["to_unit"]) == find_unit(b))
        except (UnitError, KeyError, TypeError, ValueError):
            return False
    return "convert_units", check


MI_KM, LB_G, IN_CM = 1.609344, 453.59237, 2.54
CHAINS = [
    ("Convert 5 miles to kilometers, then multiply the result by 3.",
     units(5, "mi", "km"), calc(5 * MI_KM * 3)),
    ("What is 23*47? Convert that many grams to pounds.",
     calc(1081), units(1081, "g", "lb")),
    ("Convert 100 degrees Fahrenheit to Celsius, then add 10 to the result.",
     units(100, "F", "C"), calc((100 - 32) / 1.8 + 10)),
    ("What is 12 * 12? Then convert that many kilometers to miles.",
     calc(144), units(144, "km", "mi")),
    ("Convert 2 pounds to grams, then divide the result by 4.",
     units(2, "lb", "g"), calc(2 * LB_G / 4)),
    ("What is the square root of 1764? Convert that many inches to centimeters.",
     calc(42), units(42, "in", "cm")),
    ("Convert 10 kilometers to miles, then round the result to the nearest whole number.",
     units(10, "km", "mi"), calc(6)),
    ("What is 15% of 240? Convert that many liters to gallons.",
     calc(36), units(36, "L", "gal")),
    ("Convert 30 degrees Celsius to Fahrenheit, then subtract 32 from the result.",
     units(30, "C", "F"), calc(54)),
    ("What is 7 to the power of 3? Convert that many meters to feet.",
     calc(343), units(343, "m", "ft")),
]


def _reply(eng, prompt: str, fmt: str, registry, max_tokens: int):
    parser = ToolCallParser(fmt, registry)
    events, reply = [], ""
    for ev in eng.generate(prompt, max_tokens=max_tokens, sampling=Sampling(temperature=0)):
        reply += ev.text
        events += parser.feed(ev.text)
    events += parser.finish()
    return reply, [e for e in events if isinstance(e, (ToolCall, MalformedToolCall))]


def _ok(call, want) -> bool:
    tool, check = want
    return isinstance(call, ToolCall) and call.name == tool and check(call.arguments)


def run_chains(eng, fmt: str, max_tokens: int, system: str = SYSTEM) -> list[dict]:
    registry = ToolRegistry.builtin()
    rows = []
    for question, first_want, second_want in CHAINS:
        t0 = time.perf_counter()
        messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        reply1, calls1 = _reply(eng, prompt_text(eng, messages, registry, fmt), fmt, registry, max_tokens)
        reply2, calls2, results = "", [], []
        if calls1:
            results = [registry.execute(c, ToolContext()) for c in calls1]
            messages = messages_with_tool_round(messages, "", calls1, results, format=fmt)
            reply2, calls2 = _reply(eng, prompt_text(eng, messages, registry, fmt), fmt, registry, max_tokens)
        first = calls1[0] if calls1 else None
        second = calls1[1] if len(calls1) > 1 else (calls2[0] if calls2 else None)
        rows.append({
            "prompt": question, "replies": [reply1, reply2], "seconds": round(time.perf_counter() - t0, 1),
            "results": [r.content for r in results],
            "calls": [{"name": getattr(c, "name", None), "arguments": getattr(c, "arguments", None),
                       "error": getattr(c, "error", None)} for c in (first, second) if c is not None],
            "expected_tools": [first_want[0], second_want[0]],
            "first_right": _ok(first, first_want), "second_right": _ok(second, second_want),
        })
        rows[-1]["right"] = rows[-1]["first_right"] and rows[-1]["second_right"]
        print(f"  {question!r}: first {'ok' if rows[-1]['first_right'] else 'WRONG'}, second "
              f"{'ok' if rows[-1]['second_right'] else 'WRONG'} ({rows[-1]['seconds']} s)", flush=True)
    return rows


def chain_table(rows: list[dict]) -> str:
    def show(c):
        if not c:
            return "none"
        if c.get("error"):
            return "malformed"
        return f"{c['name']} {c['arguments']}".replace("|", "\\|")
    lines = ["| question | first call | second call | right |", "|---|---|---|---|"]
    for r in rows:
        cs = r["calls"] + [None] * (2 - len(r["calls"]))
        lines.append(f"| {r['prompt']} | {show(cs[0])}{'' if r['first_right'] else ' ✗'} | "
                     f"{show(cs[1])}{'' if r['second_right'] else ' ✗'} | {'yes' if r['right'] else 'no'} |")
    n = len(rows)
    lines.append(f"| **total** | **{sum(r['first_right'] for r in rows)}/{n}** | "
                 f"**{sum(r['second_right'] for r in rows)}/{n}** | **{sum(r['right'] for r in rows)}/{n}** |")
    return "\n".join(lines)
