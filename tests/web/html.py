"""Reading the dashboard's HTML in tests: counters by data path, embedded JSON, table rows."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any


class _Collector(HTMLParser):
    """Text of elements carrying ``data-path``, and of each table body's rows."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: dict[str, str] = {}
        self.rows: list[list[str]] = []
        self._open: list[tuple[str, str | None]] = []  # (tag, data-path) of open elements
        self._texts: dict[int, list[str]] = {}
        self._in_tbody = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self._open.append((tag, found.get("data-path")))
        if found.get("data-path") and found.get("data-format"):
            self._texts[len(self._open)] = []
        if tag == "tbody":
            self._in_tbody = True
        elif tag == "tr" and self._in_tbody:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            depth = len(self._open)
            open_tag, path = self._open.pop()
            if depth in self._texts and path:
                self.paths.setdefault(path, "".join(self._texts.pop(depth)).strip())
            if open_tag == tag:
                break
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None
        elif tag == "tbody":
            self._in_tbody = False

    def handle_data(self, data: str) -> None:
        for texts in self._texts.values():
            texts.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(html: str) -> _Collector:
    collector = _Collector()
    collector.feed(html)
    return collector


def counters(html: str) -> dict[str, str]:
    """The first element's text for each ``data-path`` (value before its note)."""
    return parse(html).paths


def table_rows(html: str) -> list[list[str]]:
    return parse(html).rows


def embedded_json(html: str, element_id: str) -> Any:
    start_tag = f'<script id="{element_id}" type="application/json">'
    start = html.index(start_tag) + len(start_tag)
    return json.loads(html[start : html.index("</script>", start)])
