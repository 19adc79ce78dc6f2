"""Chat templates: a model's `tokenizer.chat_template` (Jinja) rendered the way Hugging Face's
`apply_chat_template` renders it, so that the prompt is what the model was trained on.

As in transformers: an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loop-control extension, `{% generation %}` accepted and ignored, `raise_exception(msg)`,
`strftime_now(fmt)`, and a `tojson` filter that does not escape HTML and takes `indent`,
`separators`, `sort_keys` and `ensure_ascii`. Variables: `messages`, `tools`,
`add_generation_prompt`, `bos_token`, `eos_token`, plus any extra ones the caller passes
(`enable_thinking`, `date_string` ...).

A file without a template gets ChatML (`<|im_start|>role\\ncontent<|im_end|>\\n`). Every failure
(syntax, an undefined operation, `raise_exception`) is a TemplateError naming the model.

A template is code from the model file, so rendering is bounded: `range()` yields at most
MAX_RANGE items, no value it builds (by `*`, `+`, `~`, `%`, a filter or a call) may hold more than
`max_chars` items, nor may the rendered text, and a render that runs past `time_limit_s` (a nested loop, a deep recursion)
is stopped by an exception raised in the rendering thread. Each is a TemplateError, and the caller
(the app's engine thread, a server worker) goes on.

The rendered text holds the template's own BOS text when the template writes `bos_token`; the
caller tokenizes it with `parse_special=True` and must not add a second BOS.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import TemplateError
from ..gguf import GGUFFile
from ..system.watchdog import Deadline, deadline

MAX_RANGE = 100_000                 # items one range() may yield
MAX_CHARS = 4 << 20                 # rendered characters: a million tokens and more, beyond any context
TIME_LIMIT_S = 5.0                  # real templates render a long chat in milliseconds
BUILD_BUDGET = 64                   # times MAX_CHARS: all one render may build (templates that grow
                                    # the prompt message by message build it quadratically)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class _TemplateRaised(Exception):
    """raise_exception() inside a template."""


class _GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for training masks in
    transformers; for rendering it is transparent."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # transformers' filter: jinja's own escapes <, >, & and ' for HTML, which templates never want
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str):
    raise _TemplateRaised(message)


class _TemplateTooLarge(Exception):
    """A value or the output of a template passed the size cap."""


def _bounded_range(*args) -> range:
    r = range(*args)
    if len(r) > MAX_RANGE:
        raise _TemplateTooLarge(f"range() of {len(r):,} items (at most {MAX_RANGE:,})")
    return r


class _BoundedBuffer(list):
    """Where a template's captured output (a set block, a macro body) collects: counted as it grows."""

    def __init__(self, max_chars: int):
        super().__init__()
        self.max_chars, self.chars = max_chars, 0

    def append(self, part) -> None:
        self._count(len(part))
        super().append(part)

    def extend(self, parts) -> None:
        parts = list(parts)
        self._count(sum(map(len, parts)))
        super().extend(parts)

    def _count(self, n: int) -> None:
        self.chars += n
        if self.chars > self.max_chars:
            raise _TemplateTooLarge(f"captured output of more than {self.max_chars:,} characters")


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` so that its result goes through the environment's size check, and captured
    output into a buffer that counts what it holds."""

    def visit_Concat(self, node, frame) -> None:
        self.write("environment.bounded(")
        super().visit_Concat(node, frame)
        self.write(")")

    def buffer(self, frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.new_buffer()")


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, with every value a template builds checked against the size cap: `*` and the
    joins of captured output before they build (a length times any number; any number of parts),
    `+`, `%`, `~`, calls and filters after (they at most add their operands' lengths, so a loop
    that doubles a string stops at twice the cap)."""
    intercepted_binops = frozenset({"*", "+", "%"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, max_chars: int, **kw):
        super().__init__(**kw)
        self.max_chars = max_chars
        self._render = threading.local()
        # Compiled templates join captured output (set blocks, macro bodies, filter blocks) with
        # `environment.concat`: measured before joining, so no such join builds past the cap.
        self.concat = self.bounded_join

    def new_buffer(self) -> _BoundedBuffer:
        return _BoundedBuffer(self.max_chars)

    def bounded_join(self, parts) -> str:
        parts = parts if isinstance(parts, list) else list(parts)
        n = sum(map(len, parts))
        if n > self.max_chars:
            raise _TemplateTooLarge(f"captured output of {n:,} characters (at most {self.max_chars:,})")
        return "".join(parts)

    def bounded(self, value, what: str = "a value"):
        if isinstance(value, (str, list, tuple, dict)):
            n = len(value)
            if n > self.max_chars:
                raise _TemplateTooLarge(f"{what} of {n:,} items (at most {self.max_chars:,})")
            left = getattr(self._render, "left", None)
            if left is not None:
                self._render.left = left - n
                if left - n < 0:
                    raise _TemplateTooLarge(f"more than {BUILD_BUDGET * self.max_chars:,} items built in all")
        return value

    @contextlib.contextmanager
    def budget(self):
        """What one render may build in all (each value it builds may be kept, so this bounds its
        memory): BUILD_BUDGET times the output cap."""
        self._render.left = BUILD_BUDGET * self.max_chars
        try:
            yield
        finally:
            self._render.left = None

    def bound_filters(self) -> None:
        for name, f in list(self.filters.items()):
            self.filters[name] = self._bounded_filter(name, f)

    def _bounded_filter(self, name: str, f):
        @functools.wraps(f)   # keeps jinja's pass_context / pass_environment marks
        def bounded_filter(*args, **kwargs):
            return self.bounded(f(*args, **kwargs), f"the filter {name}'s result")
        return bounded_filter

    def call_binop(self, context, operator: str, left, right):
        if operator == "*":
            seq, n = (left, right) if isinstance(right, int) else (right, left)
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > self.max_chars:
                raise _TemplateTooLarge(f"'*' would build {len(seq) * n:,} items (at most {self.max_chars:,})")
        return self.bounded(super().call_binop(context, operator, left, right), f"the result of '{operator}'")

    def call(self, context, obj, /, *args, **kwargs):
        return self.bounded(super().call(context, obj, *args, **kwargs), "a call's result")


def _environment(clock: Callable[[], datetime], max_chars: int) -> ImmutableSandboxedEnvironment:
    env = _BoundedEnvironment(max_chars, trim_blocks=True, lstrip_blocks=True,
                              extensions=[_GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: clock().strftime(fmt)
    env.globals["range"] = _bounded_range
    env.bound_filters()
    return env


class ChatTemplate:
    """One model's chat template. `render(messages, tools=None, add_generation_prompt=True)`.

    Messages are dicts with `role` and `content`, and optionally `tool_calls` (OpenAI style:
    `[{"type": "function", "function": {"name": ..., "arguments": {...}}}]`), `tool_call_id`,
    `name`, `reasoning_content`. Arguments given as a JSON string are parsed into an object first,
    as llama.cpp's server does, because templates such as Llama 3's iterate over them.
    """

    def __init__(self, source: str, *, model_name: str = "model", bos_token: str = "", eos_token: str = "",
                 is_fallback: bool = False, clock: Callable[[], datetime] = datetime.now,
                 max_chars: int = MAX_CHARS, time_limit_s: float = TIME_LIMIT_S):
        self.source = source
        self.model_name = model_name
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.is_fallback = is_fallback
        self.max_chars, self.time_limit_s = max_chars, time_limit_s
        try:
            self._template = _environment(clock, max_chars).from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"{model_name}: the chat template does not parse (line {e.lineno}: {e.message})") from e

    @classmethod
    def from_gguf(cls, gguf: GGUFFile | str | os.PathLike, model_name: str | None = None,
                  clock: Callable[[], datetime] = datetime.now) -> "ChatTemplate":
        """The template in `tokenizer.chat_template`, or ChatML when the file has none.
        `model_name` (for error messages) defaults to `general.name`, then the file name."""
        if not isinstance(gguf, GGUFFile):
            gguf = GGUFFile.open(gguf, check_types=False)
        meta = gguf.metadata
        name = model_name or str(meta.get("general.name") or gguf.path.name)
        source = meta.get("tokenizer.chat_template")
        tokens = meta.get("tokenizer.ggml.tokens")

        def token(key: str) -> str:
            tid = meta.get(key)
            if tokens is None or tid is None or not 0 <= int(tid) < len(tokens):
                return ""
            return tokens[int(tid)]

        bos, eos = token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id")
        if not isinstance(source, str) or not source.strip():
            return cls(CHATML_TEMPLATE, model_name=name, bos_token=bos, eos_token=eos, is_fallback=True, clock=clock)
        return cls(source, model_name=name, bos_token=bos, eos_token=eos, clock=clock)

    @classmethod
    def chatml(cls, model_name: str = "model") -> "ChatTemplate":
        return cls(CHATML_TEMPLATE, model_name=model_name, is_fallback=True)

    def render(self, messages: Iterable[Mapping[str, Any]], tools: list[dict] | None = None,
               add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text. `extra` become template variables (e.g. enable_thinking=False)."""
        variables = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                     "messages": [_prepare_message(m) for m in messages],
                     "add_generation_prompt": add_generation_prompt}
        if tools is not None:
            variables["tools"] = tools
        try:
            with deadline(self.time_limit_s):
                return self._render_capped(variables)
        except Deadline:
            raise TemplateError(f"{self.model_name}: the chat template ran for more than {self.time_limit_s:g} s "
                                "and was stopped (a loop that does not end?)") from None
        except _TemplateTooLarge as e:
            raise TemplateError(f"{self.model_name}: the chat template renders too much: {e}") from None
        except RecursionError:
            raise TemplateError(f"{self.model_name}: the chat template recursed too deeply") from None
        except MemoryError:
            raise TemplateError(f"{self.model_name}: the chat template ran out of memory") from None
        except _TemplateRaised as e:
            raise TemplateError(f"{self.model_name}: the chat template refused the conversation: {e}") from None
        except jinja2.TemplateError as e:
            raise TemplateError(f"{self.model_name}: the chat template failed: {e}") from e
        except TemplateError:
            raise
        except Exception as e:  # noqa: BLE001  a template is the model's code: any failure is its failure
            raise TemplateError(f"{self.model_name}: the chat template failed: {type(e).__name__}: {e}") from e

    def _render_capped(self, variables: dict) -> str:
        """The rendered text, stopped as soon as it passes `max_chars` (or builds past the budget)."""
        parts, n = [], 0
        with self._template.environment.budget():
            for part in self._template.generate(**variables):
                n += len(part)
                if n > self.max_chars:
                    raise _TemplateTooLarge(f"more than {self.max_chars:,} characters")
                parts.append(part)
        return "".join(parts)

    def __repr__(self) -> str:
        kind = "ChatML fallback" if self.is_fallback else f"{len(self.source)} chars"
        return f"ChatTemplate({self.model_name}: {kind})"


def _prepare_message(message: Mapping[str, Any]) -> dict:
    if not isinstance(message, Mapping):
        raise TemplateError(f"a chat message must be a mapping with 'role' and 'content', not {type(message).__name__}")
    m = dict(message)
    calls = m.get("tool_calls")
    if calls:
        m["tool_calls"] = [_prepare_tool_call(c) for c in calls]
    return m


def _prepare_tool_call(call: Mapping[str, Any]) -> dict:
    call = dict(call)
    fn = call.get("function")
    if isinstance(fn, Mapping):
        fn = dict(fn)
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                parsed = json.loads(args)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                fn["arguments"] = parsed
        call["function"] = fn
    return call
