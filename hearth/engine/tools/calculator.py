"""The calculator tool: arithmetic parsed by a recursive-descent parser. No eval, no Python names.

Grammar (lowest precedence first; `**` binds tighter than a unary minus on its left, as in Python,
so -2**2 = -4, and is right-associative, so 2**3**2 = 2**9):

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/' | '//' | '%') unary)*
    unary   := ('+' | '-') unary | power
    power   := atom (('**' | '^') unary)?
    atom    := NUMBER | NAME | NAME '(' expr (',' expr)* ')' | '(' expr ')'

Safe by construction: the only names are the constants and functions in the tables below, there is
no attribute access, no strings, and every step is bounded: the input length, the nesting depth
(checked before Python's own recursion limit could be reached), the size of every intermediate
result, and the exponent of a power (checked from the operands' magnitudes *before* computing, so
9**9**9**9 fails at once instead of building a billion-digit integer).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal

MAX_INPUT_CHARS = 1000
MAX_DEPTH = 60            # nested parentheses, unary signs and function calls together
MAX_ABS = 1e300           # larger intermediate or final results are refused
MAX_INT_BITS = 1000       # exact integers stay below 2**1000 (about 1e301)
MAX_ROUND_DIGITS = 15


class CalculatorError(ValueError):
    """A clean, user-readable reason the expression cannot be evaluated."""


@dataclass(frozen=True)
class Token:
    kind: str       # "num", "name", "op", "end"
    text: str
    pos: int        # 0-based character offset in the input, for error messages


_TOKEN_RE = re.compile(r"""
    (?P<space>\s+)
  | (?P<num>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>\*\*|//|[-+*/%^(),×÷−])
""", re.VERBOSE)
_OP_ALIASES = {"^": "**", "×": "*", "÷": "/", "−": "-"}


def tokenize(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            ch = text[pos]
            hint = ""
            if ch == ".":
                hint = " (attribute access is not allowed)"
            elif ch in "'\"":
                hint = " (strings are not allowed)"
            elif ch in "[]{}":
                hint = " (only round parentheses are allowed)"
            raise CalculatorError(f"unexpected character {ch!r} at position {pos + 1}{hint}")
        kind = m.lastgroup
        if kind != "space":
            tok = m.group()
            tokens.append(Token(kind, _OP_ALIASES.get(tok, tok), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _check(x: float | int) -> float | int:
    """Refuse results that are too large or undefined; keep exact integers exact."""
    if isinstance(x, int):
        if x.bit_length() > MAX_INT_BITS:
            raise CalculatorError("the result is too large")
        return x
    if math.isnan(x):
        raise CalculatorError("the result is undefined (not a number)")
    if math.isinf(x) or abs(x) > MAX_ABS:
        raise CalculatorError("the result is too large")
    return x


def _as_float(x: float | int) -> float:
    try:
        return float(x)
    except OverflowError:
        raise CalculatorError("the result is too large") from None


def _power(base: float | int, exp: float | int) -> float | int:
    if base == 0 and exp < 0:
        raise CalculatorError("division by zero (0 raised to a negative power)")
    if abs(base) > 1 and abs(exp) > 1:
        # |base ** exp| = 2 ** (exp * log2|base|): refuse before computing if that is too big
        magnitude_bits = abs(exp) * math.log2(abs(base))
        if exp > 0 and magnitude_bits > MAX_INT_BITS:
            raise CalculatorError("the result is too large")
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        return _check(base ** exp)
    if base < 0 and not float(exp).is_integer():
        raise CalculatorError("a negative number raised to a fractional power is not a real number")
    try:
        return _check(math.pow(_as_float(base), _as_float(exp)))
    except OverflowError:
        raise CalculatorError("the result is too large") from None


def _divide(a, b, op: str):
    if b == 0:
        raise CalculatorError("division by zero")
    try:
        if op == "//":
            return _check(a // b)
        if op == "%":
            return _check(a % b)
        if isinstance(a, int) and isinstance(b, int) and a % b == 0:
            return a // b       # keep exact integers exact: 10/2 is 5, not 5.0
        return _check(a / b)
    except OverflowError:
        raise CalculatorError("the result is too large") from None


def _sqrt(x):
    if x < 0:
        raise CalculatorError("square root of a negative number")
    if isinstance(x, int):
        r = math.isqrt(x)
        if r * r == x:
            return r
    return math.sqrt(_as_float(x))


def _log(x, base=None):
    if x <= 0:
        raise CalculatorError("logarithm of a number that is not positive")
    if base is None:
        return math.log10(x)
    if base <= 0 or base == 1:
        raise CalculatorError("the base of a logarithm must be positive and not 1")
    return math.log(x) / math.log(base)


def _ln(x):
    if x <= 0:
        raise CalculatorError("logarithm of a number that is not positive")
    return math.log(x)


def _exp(x):
    if x > 690:
        raise CalculatorError("the result is too large")
    return math.exp(x)


def _trig(f):
    def g(x):
        if abs(x) > 1e15:
            raise CalculatorError("the angle is too large to be meaningful")
        return f(_as_float(x))
    return g


def _round(x, digits=0):
    """Round half away from zero on the number as written (2.5 -> 3, 2.675 -> 2.68), which is
    what a person means, unlike Python's round (banker's rounding on the binary value)."""
    if not float(digits).is_integer() or abs(digits) > MAX_ROUND_DIGITS:
        raise CalculatorError(f"round's second argument must be a whole number from "
                              f"-{MAX_ROUND_DIGITS} to {MAX_ROUND_DIGITS}")
    digits = int(digits)
    exact = Context(prec=MAX_INT_BITS // 3 + MAX_ROUND_DIGITS + 10)   # enough digits for any |x| <= MAX_ABS
    q = Decimal(str(x)).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP, context=exact)
    return int(q) if digits <= 0 else float(q)


# name: (function, minimum arguments, maximum arguments or None for any number)
FUNCTIONS = {
    "sqrt": (_sqrt, 1, 1),
    "sin": (_trig(math.sin), 1, 1),
    "cos": (_trig(math.cos), 1, 1),
    "tan": (_trig(math.tan), 1, 1),
    "log": (_log, 1, 2),
    "ln": (_ln, 1, 1),
    "exp": (_exp, 1, 1),
    "abs": (abs, 1, 1),
    "round": (_round, 1, 2),
    "floor": (math.floor, 1, 1),
    "ceil": (math.ceil, 1, 1),
    "min": (lambda *xs: min(xs), 1, None),
    "max": (lambda *xs: max(xs), 1, None),
}
CONSTANTS = {"pi": math.pi, "e": math.e}


class _Parser:
    def __init__(self, tokens: list[Token]):
        self.tokens, self.i, self.depth = tokens, 0, 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        t = self.tokens[self.i]
        self.i += 1
        return t

    def expect(self, text: str) -> None:
        t = self.take()
        if t.text != text or t.kind != "op":
            raise CalculatorError(f"expected {text!r} at position {t.pos + 1}, found {_describe(t)}")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise CalculatorError(f"the expression is nested more than {MAX_DEPTH} levels deep")

    def parse(self):
        value = self.expr()
        if self.tok.kind != "end":
            raise CalculatorError(f"unexpected {_describe(self.tok)} at position {self.tok.pos + 1}")
        return value

    def expr(self):
        value = self.term()
        while self.tok.kind == "op" and self.tok.text in ("+", "-"):
            op = self.take().text
            rhs = self.term()
            value = _check(value + rhs if op == "+" else value - rhs)
        return value

    def term(self):
        value = self.unary()
        while self.tok.kind == "op" and self.tok.text in ("*", "/", "//", "%"):
            op = self.take().text
            rhs = self.unary()
            value = _check(value * rhs) if op == "*" else _divide(value, rhs, op)
        return value

    def unary(self):
        if self.tok.kind == "op" and self.tok.text in ("+", "-"):
            op = self.take().text
            self.enter()
            value = self.unary()
            self.depth -= 1
            return -value if op == "-" else value
        return self.power()

    def power(self):
        base = self.atom()
        if self.tok.kind == "op" and self.tok.text == "**":
            self.take()
            self.enter()
            exp = self.unary()
            self.depth -= 1
            return _power(base, exp)
        return base

    def atom(self):
        t = self.take()
        if t.kind == "num":
            try:
                value = int(t.text) if t.text.isdigit() else float(t.text)
            except ValueError:
                raise CalculatorError(f"bad number {t.text!r}") from None
            if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
                raise CalculatorError(f"the number at position {t.pos + 1} is too large")
            if isinstance(value, float) and (math.isinf(value) or abs(value) > MAX_ABS):
                raise CalculatorError(f"the number at position {t.pos + 1} is too large")
            return value
        if t.kind == "name":
            if self.tok.kind == "op" and self.tok.text == "(":
                return self.call(t)
            if t.text in CONSTANTS:
                return CONSTANTS[t.text]
            if t.text in FUNCTIONS:
                raise CalculatorError(f"{t.text} is a function: write {t.text}(...)")
            raise CalculatorError(f"unknown name {t.text!r} at position {t.pos + 1}; allowed are "
                                  f"{', '.join(CONSTANTS)} and the functions {', '.join(FUNCTIONS)}")
        if t.kind == "op" and t.text == "(":
            self.enter()
            value = self.expr()
            self.expect(")")
            self.depth -= 1
            return value
        raise CalculatorError(f"expected a number at position {t.pos + 1}, found {_describe(t)}")

    def call(self, name: Token):
        if name.text not in FUNCTIONS:
            raise CalculatorError(f"unknown function {name.text!r} at position {name.pos + 1}; "
                                  f"allowed are {', '.join(FUNCTIONS)}")
        fn, lo, hi = FUNCTIONS[name.text]
        self.expect("(")
        self.enter()
        args = [self.expr()]
        while self.tok.kind == "op" and self.tok.text == ",":
            self.take()
            args.append(self.expr())
        self.expect(")")
        self.depth -= 1
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if lo == hi else (f"{lo} or {hi}" if hi else f"at least {lo}")
            raise CalculatorError(f"{name.text} takes {want} argument{'s' if want != '1' else ''}, "
                                  f"got {len(args)}")
        try:
            return _check(fn(*args))
        except CalculatorError:
            raise
        except (ArithmeticError, ValueError, TypeError) as e:   # overflow, decimal, math domain
            raise CalculatorError(f"{name.text}: {e or 'the result is out of range'}") from None


def _describe(t: Token) -> str:
    return "the end of the expression" if t.kind == "end" else repr(t.text)


def evaluate(expression: str) -> int | float:
    """Evaluate an arithmetic expression; raises CalculatorError with a clear reason."""
    if not isinstance(expression, str):
        raise CalculatorError("the expression must be a string")
    if len(expression) > MAX_INPUT_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_INPUT_CHARS} characters")
    if not expression.strip():
        raise CalculatorError("the expression is empty")
    value = _Parser(tokenize(expression)).parse()
    return _check(value)


def format_number(x: int | float) -> str:
    """Integers exactly; floats to 12 significant digits, so 0.1 + 0.2 reads 0.3."""
    if isinstance(x, int):
        return str(x)
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.12g}"


def calculate(expression: str) -> str:
    """The calculator tool's result text."""
    return format_number(evaluate(expression))
