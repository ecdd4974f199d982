"""The ring polls' JSON (``/v1/requests``, ``/admin/stats``), each ring row encoded once.

About half of a 100-row poll went to turning the records into wire dicts (``entry()``) and
those into JSON, on every poll (docs/benchmarks.md, "perf-poll"). A ring row never
changes once pushed, and pollers read the ring's tail, so ``RingPageRenderer`` encodes
a row on the first poll that returns it, keeps the bytes, and joins the kept bytes into
each page's document. The document is byte for byte what ``FerroxJSONRenderer`` writes
for ``documents.ring_page()`` (tests/api/test_wire.py holds it to that for arbitrary
records); only ``Accept: application/json; indent=N`` takes the renderer's own path.

Memory: the newest ``ROWS_KEPT`` rows' JSON of the ring that answered, up to twice that
between trims: about 650 bytes a row (tracemalloc), at most about 1.3 MB per process.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rest_framework.compat import LONG_SEPARATORS, SHORT_SEPARATORS

from ..core.requests import Record, Stats, entry
from ..core.ring import Page
from .base import FerroxJSONRenderer

__all__ = [
    "ROWS_KEPT",
    "ROW_JSON",
    "PreparedRenderer",
    "RingDocument",
    "RingPageRenderer",
    "RowJSON",
    "splice",
]

ROWS_KEPT = 1024
"""Rows whose JSON is kept (the newest by seq); the memory bound is twice this."""

Encode = Callable[[Any], bytes]


@dataclass(frozen=True, slots=True)
class RingDocument:
    """A ring page's document, left for ``RingPageRenderer`` to write.

    ``build`` is the ``documents`` function that makes the document from the page; its
    ``"entries"`` is ``page_entries(page)``, which the renderer writes from kept JSON.
    """

    stats: Stats
    page: Page[Record]
    build: Callable[[Page[Record]], dict[str, Any]]

    def document(self) -> dict[str, Any]:
        """The document as a dict: what the renderer writes, and what it writes from."""
        return self.build(self.page)


class RowJSON:
    """The wire JSON of one ring's rows by seq, for one encoder; thread-safe.

    Reads take no lock: a trim or a new owner swaps in a new dict, and a reader keeps
    the one it started with.
    """

    def __init__(self, keep: int = ROWS_KEPT) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        # The rows belong to one ring (held weakly: a reset recorder's ring may go) and
        # one encoder's settings; anything else starts afresh. One attribute, so that a
        # reader never pairs one owner with another's rows.
        self._state: tuple[weakref.ref[Stats] | None, Any, dict[int, bytes]] = (None, None, {})

    def encoded(self, stats: Stats, page: Page[Record], encode: Encode, key: Any) -> list[bytes]:
        """Each row of ``page`` as ``encode(entry(record, seq))``, encoded at most once."""
        rows = self._rows_of(stats, key)
        out: list[bytes] = []
        new: dict[int, bytes] = {}
        for seq, record in page.rows:
            data = rows.get(seq)
            if data is None:
                data = new[seq] = encode(entry(record, seq))
            out.append(data)
        if new:
            self._keep(rows, new)
        return out

    def _rows_of(self, stats: Stats, key: Any) -> dict[int, bytes]:
        owner, owner_key, rows = self._state
        if owner is not None and owner() is stats and owner_key == key:
            return rows
        with self._lock:
            owner, owner_key, rows = self._state
            if owner is None or owner() is not stats or owner_key != key:
                rows = {}
                self._state = (weakref.ref(stats), key, rows)
            return rows

    def _keep(self, rows: dict[int, bytes], new: dict[int, bytes]) -> None:
        with self._lock:
            owner, key, current = self._state
            if rows is not current:
                return  # another ring or encoder took over meanwhile
            rows.update(new)
            if len(rows) > 2 * self.keep:
                # Polls read the tail: keep the newest rows.
                newest = sorted(rows)[-self.keep :]
                self._state = (owner, key, {seq: rows[seq] for seq in newest})

    def __len__(self) -> int:
        return len(self._state[2])

    def clear(self) -> None:
        """Forget every kept row (a benchmark's poll that encodes every row)."""
        with self._lock:
            self._state = (None, None, {})


ROW_JSON = RowJSON()
"""The process's kept rows, shared by every ring poll."""


class PreparedRenderer(FerroxJSONRenderer):
    """``FerroxJSONRenderer``, writing a prepared document (an instance of
    ``prepared``) by ``write``, the bytes DRF would write for its ``document()``; an
    indented answer (``Accept: application/json; indent=N``), a document ``write``
    declines (``None``: DRF then refuses it as it would) and any other data take DRF's
    path."""

    prepared: type[Any]

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> Any:
        if not isinstance(data, self.prepared):
            return super().render(data, accepted_media_type, renderer_context)
        indent = self.get_indent(accepted_media_type or "", renderer_context or {})
        if indent is None and self.strict:
            separators = SHORT_SEPARATORS if self.compact else LONG_SEPARATORS
            encoder = self.encoder_class(
                ensure_ascii=self.ensure_ascii, allow_nan=False, separators=separators
            )
            written = self.write(data, encoder, separators)
            if written is not None:
                return written
        return super().render(data.document(), accepted_media_type, renderer_context)

    def write(self, data: Any, encoder: Any, separators: tuple[str, str]) -> bytes | None:
        raise NotImplementedError


class RingPageRenderer(PreparedRenderer):
    """Writes a ``RingDocument``'s rows from kept JSON."""

    prepared = RingDocument

    def write(self, data: Any, encoder: Any, separators: tuple[str, str]) -> bytes | None:
        def encode(value: Any) -> bytes:
            # As JSONRenderer.render: U+2028 and U+2029 escaped, for JavaScript.
            text: str = encoder.encode(value)
            return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029").encode()

        key = (self.encoder_class, self.ensure_ascii, self.strict, separators)
        rows = ROW_JSON.encoded(data.stats, data.page, encode, key)
        return splice(data.build(replace(data.page, rows=())), rows, encode, separators)


def splice(
    document: dict[str, Any], rows: list[bytes], encode: Encode, separators: tuple[str, str]
) -> bytes:
    """``document`` encoded with ``rows`` (each an encoded value) as its ``"entries"`` list.

    The same bytes as encoding the document with the decoded rows in place, for an
    encoder without indent writing with ``separators``.
    """
    item, colon = (s.encode() for s in separators)
    keys = list(document)
    at = keys.index("entries")
    parts = [b"{"]
    head = {k: document[k] for k in keys[:at]}
    if head:
        parts += [encode(head)[1:-1], item]
    parts += [json.dumps("entries").encode(), colon, b"[", item.join(rows), b"]"]
    tail = {k: document[k] for k in keys[at + 1 :]}
    if tail:
        parts += [item, encode(tail)[1:-1]]
    parts.append(b"}")
    return b"".join(parts)
