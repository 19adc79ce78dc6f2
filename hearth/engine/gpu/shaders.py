"""WGSL sources: `engine/wgsl/*.wgsl`, read with importlib.resources and rendered with jinja2.

Templates use strict undefined variables (a misspelt template variable is an error, not an empty
string) and `{{ raise("...") }}` for combinations a kernel does not support. Rendered text is cached
per (name, variables), so building the same pipeline twice costs one dict lookup.
"""

from __future__ import annotations

import functools
import importlib.resources

import jinja2

from ..errors import EngineError


class ShaderTemplateError(EngineError):
    """A kernel template was asked for something it cannot do."""


def _raise(msg: str):
    raise ShaderTemplateError(msg)


@functools.lru_cache(maxsize=None)
def source(name: str) -> str:
    """The raw text of `engine/wgsl/<name>`."""
    try:
        return (importlib.resources.files("hearth.engine") / "wgsl" / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShaderTemplateError(f"no shader template named {name}") from None


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FunctionLoader(lambda n: source(n)),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True, autoescape=False)
    env.globals["raise"] = _raise
    return env


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    return v


@functools.lru_cache(maxsize=None)
def _render(name: str, frozen: tuple) -> str:
    try:
        return _env().get_template(name).render(**dict(frozen))
    except jinja2.UndefinedError as e:
        raise ShaderTemplateError(f"{name}: template variable missing: {e.message}") from None


def render(name: str, **variables) -> str:
    """Render `engine/wgsl/<name>` with `variables` (lists become tuples for the cache key)."""
    return _render(name, tuple(sorted((k, _freeze(v)) for k, v in variables.items())))
