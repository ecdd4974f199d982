"""Blocks of named-tuple rows packed into one ``bytes`` each: what a large ring retains.

A block is stored by column, with ``marshal`` (which writes exactly the built-in types
it accepts: ints of any size, floats bit for bit, strings with lone surrogates, ``None``
apart from ``0``, ``True`` apart from ``1``, and refuses anything else, a subclass of
``str`` or ``int`` included). A label column (a model, a route, a status) whose values
repeat is written once per distinct value plus one byte per row, so no table outlives
its block: nothing grows with the number of distinct labels ever seen.

Measured on realistic records (``bench/ring_memory.py``): about 110 bytes per row
against about 700 for the row kept as a tuple of its own objects.
"""

from __future__ import annotations

import itertools
import marshal
from collections import defaultdict
from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple, TypeVar

from .ring import Packing

R = TypeVar("R", bound=NamedTuple)

_NONE = type(None)
# Column value types whose equal values are interchangeable: a column of these is
# coded by distinct value. (``1 == True == 1.0`` and ``0.0 == -0.0``: a column mixing
# types, or of floats, is written value by value.)
_CODABLE = frozenset(
    frozenset(kinds) | extra
    for kinds in ({str}, {int}, {bool}, set())
    for extra in (frozenset(), frozenset({_NONE}))
)


def columns(cls: type[R], labels: Sequence[str]) -> Packing[R]:
    """A ``Packing`` for rows of ``cls`` that codes the ``labels`` columns by distinct value."""
    label_columns = tuple(cls._fields.index(name) for name in labels)
    make = partial(tuple.__new__, cls)

    def pack(rows: list[R]) -> bytes | None:
        table: list[Any] = list(zip(*rows, strict=True))
        for i in label_columns:
            table[i] = _coded(table[i])
        try:
            # Version 2: no back-references, whose bookkeeping made writing a third slower.
            return marshal.dumps(tuple(table), 2)
        except ValueError:
            return None  # a value marshal does not write exactly (a subclass, an object)

    def unpack(packed: bytes) -> list[R]:
        table = list(marshal.loads(packed))
        for i in label_columns:
            values, codes = table[i]
            table[i] = values if codes is None else map(values.__getitem__, codes)
        return list(map(make, zip(*table, strict=True)))

    return Packing(pack, unpack)


def _coded(column: tuple[Any, ...]) -> tuple[tuple[Any, ...], bytes | None]:
    """``(distinct values, a byte per row)``, or ``(column, None)`` when it cannot be coded."""
    if column.count(None) == len(column) or frozenset(map(type, column)) not in _CODABLE:
        return column, None  # all None (one byte a row either way), or mixed types
    # One pass: a value not seen yet in this column gets the next code.
    code: defaultdict[Any, int] = defaultdict(itertools.count().__next__)
    try:
        codes = bytes(map(code.__getitem__, column))
    except ValueError:
        return column, None  # more than 256 distinct values
    return tuple(code), codes
