"""The unit-conversion tool: length, mass, temperature, volume, speed, data sizes and time.

Every unit but the temperatures is a factor to its category's base unit (metre, kilogram, litre,
metre per second, byte, second); temperatures convert through kelvin with an offset. Units are
looked up by exact symbol first (so data sizes keep `Mb` megabit apart from `MB` megabyte), then
case-insensitively by symbol or name, with plurals ("miles", "feet", "inches") accepted.
"""

from __future__ import annotations

import math

from .calculator import format_number


class UnitError(ValueError):
    """A clean reason the conversion cannot be done."""


# category: {canonical symbol: (factor to the base unit, other names)}
UNITS: dict[str, dict[str, tuple[float, tuple[str, ...]]]] = {
    "length": {
        "m": (1.0, ("meter", "metre")),
        "km": (1000.0, ("kilometer", "kilometre")),
        "cm": (0.01, ("centimeter", "centimetre")),
        "mm": (0.001, ("millimeter", "millimetre")),
        "um": (1e-6, ("µm", "micrometer", "micrometre", "micron")),
        "nm": (1e-9, ("nanometer", "nanometre")),
        "mi": (1609.344, ("mile",)),
        "yd": (0.9144, ("yard",)),
        "ft": (0.3048, ("foot", "feet")),
        "in": (0.0254, ("inch", "inches")),
        "nmi": (1852.0, ("nautical mile",)),
    },
    "mass": {
        "kg": (1.0, ("kilogram", "kilo")),
        "g": (1e-3, ("gram", "gramme")),
        "mg": (1e-6, ("milligram",)),
        "ug": (1e-9, ("µg", "microgram")),
        "t": (1000.0, ("tonne", "metric ton")),
        "lb": (0.45359237, ("lbs", "pound")),
        "oz": (0.028349523125, ("ounce",)),
        "st": (6.35029318, ("stone",)),
        "short ton": (907.18474, ("us ton",)),
    },
    "volume": {
        "l": (1.0, ("L", "liter", "litre")),
        "ml": (1e-3, ("mL", "milliliter", "millilitre")),
        "cl": (1e-2, ("cL", "centiliter", "centilitre")),
        "dl": (0.1, ("dL", "deciliter", "decilitre")),
        "m3": (1000.0, ("m^3", "m³", "cubic meter", "cubic metre")),
        "cm3": (1e-3, ("cm^3", "cm³", "cc", "cubic centimeter", "cubic centimetre")),
        "gal": (3.785411784, ("gallon", "us gallon")),
        "imp gal": (4.54609, ("imperial gallon", "uk gallon")),
        "qt": (0.946352946, ("quart",)),
        "pt": (0.473176473, ("pint", "us pint")),
        "cup": (0.2365882365, ("cups",)),
        "fl oz": (0.0295735295625, ("fluid ounce", "floz")),
        "tbsp": (0.01478676478125, ("tablespoon",)),
        "tsp": (0.00492892159375, ("teaspoon",)),
    },
    "speed": {
        "m/s": (1.0, ("mps", "meter per second", "metre per second", "meters per second",
                      "metres per second")),
        "km/h": (1000 / 3600, ("kph", "kmh", "km/hr", "kilometer per hour", "kilometre per hour",
                               "kilometers per hour", "kilometres per hour")),
        "mph": (1609.344 / 3600, ("mi/h", "mile per hour", "miles per hour")),
        "kn": (1852 / 3600, ("knot", "kt", "kts")),
        "ft/s": (0.3048, ("fps", "foot per second", "feet per second")),
    },
    "data": {
        "B": (1.0, ("byte",)),
        "bit": (0.125, ("b",)),
        "kB": (1e3, ("KB", "kilobyte")),
        "MB": (1e6, ("megabyte",)),
        "GB": (1e9, ("gigabyte",)),
        "TB": (1e12, ("terabyte",)),
        "PB": (1e15, ("petabyte",)),
        "KiB": (1024.0, ("kibibyte",)),
        "MiB": (1024.0 ** 2, ("mebibyte",)),
        "GiB": (1024.0 ** 3, ("gibibyte",)),
        "TiB": (1024.0 ** 4, ("tebibyte",)),
        "kbit": (125.0, ("kilobit",)),
        "Mbit": (125e3, ("Mb", "megabit")),
        "Gbit": (125e6, ("Gb", "gigabit")),
    },
    "time": {
        "s": (1.0, ("sec", "second")),
        "ms": (1e-3, ("millisecond",)),
        "us": (1e-6, ("µs", "microsecond")),
        "ns": (1e-9, ("nanosecond",)),
        "min": (60.0, ("minute",)),
        "h": (3600.0, ("hr", "hour")),
        "d": (86400.0, ("day",)),
        "wk": (604800.0, ("week",)),
        # the mean Gregorian year and month, so that 1 year = 12 months = 365.2425 days
        "yr": (365.2425 * 86400, ("y", "year")),
        "mo": (365.2425 * 86400 / 12, ("month",)),
    },
}
TEMPERATURES = {   # symbol: (to kelvin, from kelvin, other names)
    "C": (lambda c: c + 273.15, lambda k: k - 273.15, ("°C", "celsius", "centigrade", "degC")),
    "F": (lambda f: (f - 32) * 5 / 9 + 273.15, lambda k: (k - 273.15) * 9 / 5 + 32,
          ("°F", "fahrenheit", "degF")),
    "K": (lambda k: k, lambda k: k, ("kelvin",)),
    "R": (lambda r: r * 5 / 9, lambda k: k * 9 / 5, ("°R", "rankine")),
}


def _build_tables():
    exact: dict[str, tuple[str, str]] = {}     # name as written -> (category, symbol)
    loose: dict[str, tuple[str, str]] = {}     # lower-cased name -> (category, symbol)
    entries = [(cat, sym, names) for cat, table in UNITS.items() for sym, (_, names) in table.items()]
    entries += [("temperature", sym, names) for sym, (_, _, names) in TEMPERATURES.items()]
    for cat, sym, names in entries:
        for n in (sym, *names):
            exact.setdefault(n, (cat, sym))
    for cat, sym, names in entries:
        for n in (sym, *names):
            loose.setdefault(n.lower(), (cat, sym))
            if len(n) >= 3 and not n.endswith("s"):
                loose.setdefault(n.lower() + "s", (cat, sym))          # plurals of names
    return exact, loose


_EXACT, _LOOSE = _build_tables()


def find_unit(name: str) -> tuple[str, str]:
    """(category, canonical symbol) for a unit name, or UnitError listing what is known."""
    if not isinstance(name, str) or not name.strip():
        raise UnitError("the unit is empty")
    n = " ".join(name.strip().split())
    n2 = n.removeprefix("degrees ").removeprefix("degree ")
    for key in (n, n2):
        if key in _EXACT:
            return _EXACT[key]
    for key in (n.lower(), n2.lower()):
        if key in _LOOSE:
            return _LOOSE[key]
    known = "; ".join(f"{cat}: {', '.join(table)}" for cat, table in UNITS.items())
    raise UnitError(f"unknown unit {name!r}. Known units: {known}; temperature: "
                    f"{', '.join(TEMPERATURES)}")


def convert(value: float, from_unit: str, to_unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UnitError(f"the value must be a finite number, got {value!r}")
    cat_a, a = find_unit(from_unit)
    cat_b, b = find_unit(to_unit)
    if cat_a != cat_b:
        raise UnitError(f"cannot convert {cat_a} ({from_unit}) to {cat_b} ({to_unit})")
    if cat_a == "temperature":
        kelvin = TEMPERATURES[a][0](value)
        if kelvin < -1e-9:
            raise UnitError(f"{value} {from_unit} is below absolute zero")
        return TEMPERATURES[b][1](kelvin)
    result = value * UNITS[cat_a][a][0] / UNITS[cat_b][b][0]
    if not math.isfinite(result):
        raise UnitError("the result is too large")
    return result


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """The tool's result text, e.g. '5 mi = 8.04672 km'."""
    result = convert(value, from_unit, to_unit)
    _, a = find_unit(from_unit)
    _, b = find_unit(to_unit)
    shown = {"C": "°C", "F": "°F", "R": "°R"}
    return f"{format_number(value)} {shown.get(a, a)} = {format_number(result)} {shown.get(b, b)}"
