"""The usage event's validation rules, and the two parsers derived from one
table of them (``usage.events.RULES``).

A rule says what one field must hold (``Field``: its type, whether null is
allowed, its bounds, its choices, its characters, any other test) or what
fields must hold together (``Together``: an expression over them), and the
reason ingest gives when it does not. From the one table come:

- ``fast_parser``: the common case, a valid event. Every rule of the table
  as one Python expression over the event's values, written out and
  compiled once (as ``collections.namedtuple`` and ``dataclasses`` write
  their methods), so a valid event costs one boolean expression;
- ``checked_parser``: the rules one at a time, in the table's order,
  raising the first failing rule's ``InvalidEvent``; run for an event the
  fast parser refused, to say precisely why.

Both are read from the same rules, so they accept exactly the same events
(``tests/usage/test_events.py`` holds them to it). Adding a field is one line
of the table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from typing import Any, TypedDict

# C0 and C1 control characters: refused where a rule says ``clean``.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# The reasons of the commonest type errors (``{t}``: the type given).
AN_INTEGER = "{name} must be an integer, not {t}"
AN_INTEGER_OR_NULL = "{name} must be an integer or null, not {t}"
A_STRING = "{name} must be a string, not {t}"
A_BOOLEAN = "{name} must be a boolean, not {t}"
# A reason: a template (``{name}``, ``{v}`` the value, ``{t}`` its type's
# name, ``{lo}``, ``{hi}``), or a function of the value.
Reason = str | Callable[[Any], str]


class InvalidEvent(ValueError):
    """An event ingest cannot store. ``reason`` says precisely why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Options(TypedDict, total=False):
    """A ``Field``'s options, for those shared by several fields."""

    says: Reason
    null: bool
    lo: int | None
    hi: int | None
    wrong_type: Reason | None
    too_low: Reason | None
    too_high: Reason | None


@dataclass(frozen=True, slots=True)
class Field:
    """What one field must hold. ``type`` is the one type allowed (``type(v)
    is``: True is no integer); ``datetime`` means an ISO 8601 string with a
    time zone offset (or an aware datetime, on the checked path). Bounds are
    the value's for an ``int``, the length's for a ``str``. ``says`` is the
    reason for any failure that has none of its own."""

    name: str
    type: type
    says: Reason = ""
    null: bool = False  # None is allowed too
    lo: int | None = None
    hi: int | None = None
    among: frozenset[str] | None = None
    plain: bool = False  # printable, without a backslash
    clean: bool = False  # without control characters
    test: Callable[[Any], bool] | None = None  # any other test of a value of the right type
    wrong_type: Reason | None = None
    too_low: Reason | None = None
    too_high: Reason | None = None
    group: int = 0  # 0: in the first release; n: came with the n-th group added since
    default: object = None  # what an event without the field's group means (group > 0)

    def check(self, values: dict[str, Any]) -> None:
        """Raise this rule's reason when ``values[name]`` breaks it; a time is
        replaced in ``values`` by the datetime it reads as."""
        name = self.name
        v = values[name]
        if v is None and self.null:
            return
        if self.type is datetime:
            values[name] = parse_time(name, v)
            return
        wanted: Any = self.type  # (``v`` stays Any: mypy would narrow it to ``object``)
        if type(v) is not wanted:
            raise self._invalid(self.wrong_type or self.says, v)
        if self.lo is not None or self.hi is not None:
            size = v if self.type is int else len(v)
            if self.lo is not None and size < self.lo:
                raise self._invalid(self.too_low or self.says, v)
            if self.hi is not None and size > self.hi:
                raise self._invalid(self.too_high or self.says, v)
        if self.among is not None and v not in self.among:
            raise self._invalid(self.says, v)
        if self.plain and (not v.isprintable() or "\\" in v):
            raise InvalidEvent(f"{name} contains control characters or a backslash")
        if self.clean and CONTROL.search(v):
            raise InvalidEvent(f"{name} contains control characters")
        if self.test is not None and not self.test(v):
            raise self._invalid(self.says, v)

    def _invalid(self, reason: Reason, v: Any) -> InvalidEvent:
        if callable(reason):
            return InvalidEvent(reason(v))
        text = reason.format(name=self.name, v=v, t=type(v).__name__, lo=self.lo, hi=self.hi)
        return InvalidEvent(text)

    @property
    def wire_type(self) -> str:
        """The name of the type the fast parser wants (a time: a string)."""
        return "str" if self.type is datetime else self.type.__name__

    def value_test(self) -> str | None:
        """This rule but its type as a Python expression over the field's
        value (named as the field), for ``fast_parser``; ``None``: the type
        is the whole rule. A nullable field's type is in it too. A time is
        only checked to be a string here: ``fast_parser`` reads it after."""
        n = self.name
        size = n if self.type is int else f"len({n})"
        parts = []
        if self.lo is not None or self.hi is not None:
            lo = "" if self.lo is None else f"{self.lo} <= "
            hi = "" if self.hi is None else f" <= {self.hi}"
            parts.append(f"{lo}{size}{hi}")
        if self.among is not None:
            parts.append(f"{n} in _among_{n}")
        if self.plain:
            parts.append(f"{n}.isprintable() and {_BACKSLASH} not in {n}")
        if self.clean:
            parts.append(f"(not {n} or not _control({n}))")
        if self.test is not None:
            parts.append(f"_test_{n}({n})")
        if self.null:
            typed = " and ".join([f"type({n}) is {self.wire_type}", *parts])
            return f"({n} is None or ({typed}))"
        return f"({' and '.join(parts)})" if parts else None


_BACKSLASH = repr("\\")


@dataclass(frozen=True, slots=True)
class Together:
    """What some fields must hold together: ``expr``, a Python expression
    over them (times as datetimes; ``latest``: the latest start accepted).
    ``says`` is the reason, a template of the fields' values by name or a
    function of them all (a dict)."""

    expr: str
    says: str | Callable[[dict[str, Any]], str]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(compile(self.expr, "<rule>", "eval").co_names)

    def check(self, values: dict[str, Any]) -> None:
        if not eval(self.expr, {}, values):  # noqa: S307 - the table's own expression
            says = self.says
            raise InvalidEvent(says(values) if callable(says) else says.format(**values))


Rule = Field | Together


def parse_time(name: str, value: Any) -> datetime:
    """A time field's value as an aware datetime, or its reason."""
    if type(value) is str:
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidEvent(f"{name} is not an ISO 8601 timestamp: {value[:40]!r}") from None
    elif isinstance(value, datetime):
        dt = value
    else:
        raise InvalidEvent(f"{name} must be an ISO 8601 string, not {type(value).__name__}")
    if dt.tzinfo is None:
        raise InvalidEvent(f"{name} has no time zone offset")
    return dt


# A parser's result: ``finish(values, *times)``, the event's values in the
# order of its field names and its times as datetimes.
Finish = Callable[..., Any]
# The checked parser: ``parse(event, latest)``, an event dict holding every field.
CheckedParser = Callable[[dict[str, Any], float], Any]
# The fast parser: ``parse(values, latest)``, the event's values in the order
# of its field names.
FastParser = Callable[[tuple[Any, ...], float], Any]


def checked_parser(rules: Sequence[Rule], names: Sequence[str], finish: Finish) -> CheckedParser:
    """``parse(event, latest)``: ``finish(values, *times)`` once every rule
    holds, else the first failing rule's ``InvalidEvent``."""
    values_of = itemgetter(*names)
    times = [r.name for r in rules if isinstance(r, Field) and r.type is datetime]

    def parse(event: dict[str, Any], latest: float) -> Any:
        values = {**event, "latest": latest}
        for rule in rules:
            rule.check(values)  # (a time is replaced by its datetime)
        return finish(values_of(event), *(values[t] for t in times))

    return parse


def fast_parser(rules: Sequence[Rule], names: Sequence[str], finish: Finish) -> FastParser:
    """``parse(values, latest)``: ``finish(values, *times)`` when ``values``
    (an event's, in ``names`` order) break no rule, else ``None`` (or an
    exception: a time that is no ISO 8601 string)."""
    fields = [r for r in rules if isinstance(r, Field)]
    times = [f.name for f in fields if f.type is datetime]
    after = [r for r in rules if isinstance(r, Together) and set(r.names) & set(times)]
    before = [r for r in rules if isinstance(r, Together) and r not in after]
    # The types first, one chain per type (``int is type(a) is type(b)``),
    # then what each field's value must be, then what fields must be together.
    by_type: dict[str, list[str]] = {}
    for f in fields:
        if not f.null:
            by_type.setdefault(f.wire_type, []).append(f"type({f.name})")
    first = [" is ".join([t, *typed]) for t, typed in by_type.items()]
    first += [test for f in fields if (test := f.value_test()) is not None]
    first += [f"({r.expr})" for r in before]
    then = [f"{t}.tzinfo is not None" for t in times] + [f"({r.expr})" for r in after]
    source = "\n".join(
        [
            "def parse(v, latest):",
            f"    ({', '.join(names)},) = v",
            "    if not (" + "\n        and ".join(first) + "):",
            "        return None",
            *(f"    {t} = _fromisoformat({t})" for t in times),
            "    if not (" + "\n        and ".join(then) + "):",
            "        return None",
            f"    return _finish(v, {', '.join(times)})",
        ]
    )
    namespace: dict[str, Any] = {
        "_control": CONTROL.search,
        "_fromisoformat": datetime.fromisoformat,
        "_finish": finish,
        **{f"_among_{f.name}": f.among for f in fields if f.among is not None},
        **{f"_test_{f.name}": f.test for f in fields if f.test is not None},
    }
    exec(compile(source, "<usage.events fast parser>", "exec"), namespace)  # noqa: S102 - source written above from the table
    parser: FastParser = namespace["parse"]
    parser.__doc__ = source
    return parser


__all__ = [
    "AN_INTEGER",
    "AN_INTEGER_OR_NULL",
    "A_BOOLEAN",
    "A_STRING",
    "CONTROL",
    "Field",
    "InvalidEvent",
    "Options",
    "Rule",
    "Together",
    "checked_parser",
    "fast_parser",
]
