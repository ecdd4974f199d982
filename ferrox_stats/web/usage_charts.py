"""The usage page's charts: small bar and line charts drawn as inline SVG, server-side.

No script and no chart library: the page is a report of finished buckets, drawn once.
A bucket with no rows draws no bar (zero requests); a value nothing measured (a rate
or a percentile of an empty bucket) is ``None`` and draws no point, so a line breaks
there instead of falling to 0. Colours are classes (``fx-s0``…), not inline styles,
so a strict Content-Security-Policy allows the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import count

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

__all__ = ["PALETTE_SIZE", "Chart", "Series", "bars", "lines"]

# Series colours the stylesheet defines (fx-s0 .. fx-s5).
PALETTE_SIZE = 6
# The drawing's own units; the SVG scales to its card's width.
WIDTH, HEIGHT = 640, 210
LEFT, RIGHT, TOP, BOTTOM = 58, 10, 10, 26
# Points carry their value as a tooltip only up to this many buckets (24 hours, 30
# days): at 168 hour buckets times a dozen lines they would weigh more than the page.
POINT_TITLES_UP_TO = 48
_ids = count()


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | int | None]  # one per bucket; None: nothing measured
    colour: int = 0  # index into the palette
    dashed: bool = False


@dataclass(frozen=True)
class Chart:
    """What the template shows: the SVG (or nothing, with ``empty`` saying why) and
    a legend of its series."""

    title: str
    svg: SafeString
    legend: list[Series]
    empty: bool


Format = Callable[[float], str]


def _axis_top(value: float) -> float:
    """The y axis's top: four gridline steps of 1, 2, 3 or 5 x 10^k, the smallest that
    reaches ``value`` (so a count axis never reads 2.5 requests)."""
    if value <= 0:
        return 1.0
    wanted = value / 4
    power = 10 ** math.floor(math.log10(wanted))
    step = next(s * power for s in (1, 2, 3, 5, 10) if wanted <= s * power * (1 + 1e-9))
    return float(4 * step)


def _frame(
    title: str,
    description: str,
    labels: Sequence[str],
    ticks: Sequence[tuple[int, str]],
    top: float,
    fmt: Format,
) -> tuple[list[str], float]:
    """The SVG's opening, its accessible name, the grid with y labels and the x labels."""
    n = next(_ids)
    title_id, desc_id = f"fx-svg-{n}-title", f"fx-svg-{n}-desc"
    parts = [
        f'<svg class="fx-svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{title_id} {desc_id}" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{title_id}">{escape(title)}</title>',
        f'<desc id="{desc_id}">{escape(description)}</desc>',
    ]
    plot_h = HEIGHT - TOP - BOTTOM
    for i in range(5):
        y = TOP + plot_h * (1 - i / 4)
        parts.append(
            f'<line class="fx-grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        parts.append(
            f'<text class="fx-axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(fmt(top * i / 4))}</text>"
        )
    slot = (WIDTH - LEFT - RIGHT) / max(1, len(labels))
    for i, tick in ticks:
        x = LEFT + slot * (i + 0.5)
        parts.append(
            f'<text class="fx-axis" x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
            f"{escape(tick)}</text>"
        )
    return parts, slot


def _done(parts: list[str]) -> SafeString:
    parts.append("</svg>")
    return mark_safe("".join(parts))  # every text in it went through escape()


def _y(value: float, top: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - value / top)


def bars(
    title: str,
    description: str,
    labels: Sequence[str],
    ticks: Sequence[tuple[int, str]],
    series: Sequence[Series],
    fmt: Format,
) -> Chart:
    """Stacked bars, one per bucket (``labels``: each bucket's name, in its tooltip;
    ``ticks``: the buckets named under the axis, and how). ``None`` and 0 draw nothing."""
    stacked = [sum(s.values[i] or 0 for s in series) for i in range(len(labels))]
    if not any(stacked):
        return Chart(title, mark_safe(""), list(series), True)
    top = _axis_top(max(stacked))
    parts, slot = _frame(title, description, labels, ticks, top, fmt)
    width = max(1.0, slot * 0.78)
    for i, label in enumerate(labels):
        base = 0.0
        x = LEFT + slot * i + (slot - width) / 2
        for s in series:
            value = s.values[i]
            if not value:
                continue
            y0, y1 = _y(base, top), _y(base + value, top)
            parts.append(
                f'<rect class="fx-bar fx-s{s.colour % PALETTE_SIZE}" x="{x:.1f}" y="{y1:.1f}" '
                f'width="{width:.1f}" height="{max(0.5, y0 - y1):.1f}">'
                f"<title>{escape(label)} · {escape(s.name)}: {escape(fmt(value))}</title></rect>"
            )
            base += value
    return Chart(title, _done(parts), list(series), False)


def lines(
    title: str,
    description: str,
    labels: Sequence[str],
    ticks: Sequence[tuple[int, str]],
    series: Sequence[Series],
    fmt: Format,
) -> Chart:
    """One line per series through its buckets' values, broken where a value is
    ``None`` (nothing measured); a value between two gaps is drawn as a dot."""
    measured = [v for s in series for v in s.values if v is not None]
    if not measured:
        return Chart(title, mark_safe(""), list(series), True)
    top = _axis_top(max(measured))
    parts, slot = _frame(title, description, labels, ticks, top, fmt)
    titled = len(labels) <= POINT_TITLES_UP_TO
    for s in series:
        colour = f"fx-s{s.colour % PALETTE_SIZE}"
        segments: list[list[tuple[float, float, int]]] = [[]]
        for i, value in enumerate(s.values):
            if value is None:
                if segments[-1]:
                    segments.append([])
                continue
            segments[-1].append((LEFT + slot * (i + 0.5), _y(value, top), i))
        dashed = " fx-dashed" if s.dashed else ""
        for segment in segments:
            if len(segment) > 1:
                steps = (f"{x:.1f} {y:.1f}" for x, y, _ in segment)
                path = "M" + " L".join(steps)
                parts.append(f'<path class="fx-line {colour}{dashed}" d="{path}"/>')
            for x, y, i in segment:
                if len(segment) == 1 or titled:
                    value = s.values[i]
                    assert value is not None
                    parts.append(
                        f'<circle class="fx-point {colour}" cx="{x:.1f}" cy="{y:.1f}" r="2.5">'
                        f"<title>{escape(labels[i])} · {escape(s.name)}: "
                        f"{escape(fmt(value))}</title></circle>"
                    )
    return Chart(title, _done(parts), list(series), False)
