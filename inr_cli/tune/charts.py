"""A study's charts as SVG, drawn here (no plotting library): the objective trial by trial with the
best so far (history.svg), each trial's readings against the step with the pruned ones grey
(curves.svg), and how much each setting mattered (importances.svg)."""

from __future__ import annotations

import math
from html import escape

from inr_cli.runs.pictures import nice_ticks

BLUE, RED, GREY = "#2c7fb8", "#c0392b", "#b8b8b8"


def _label(value: float) -> str:
    return f"{value:.0f}" if abs(value - round(value)) < 1e-9 and abs(value) < 1e6 else f"{value:g}"


class Axes:
    """A plot area with round ticks on both axes, a light grid, the title in a band above it."""

    def __init__(self, title: str, x_label: str, y_label: str, xs: list[float], ys: list[float],
                 width: int = 560, height: int = 320, whole_x: bool = False):
        self.width, self.height = width, height
        self.left, self.right, self.top, self.bottom = 56, 16, 40, 40
        finite = [y for y in ys if math.isfinite(y)] or [0.0]
        low, high = min(finite), max(finite)
        self.x_ticks = nice_ticks(min(xs, default=0.0), max(max(xs, default=1.0), min(xs, default=0.0) + 1), 6)
        if whole_x and any(t != int(t) for t in self.x_ticks):  # trial numbers: a tick on whole ones only
            raw = self.x_ticks[1] - self.x_ticks[0]
            step = next(m * 10 ** e for e in range(12) for m in (1, 2, 5) if m * 10 ** e >= raw)
            last = int(math.ceil(self.x_ticks[-1] / step) * step)
            self.x_ticks = [float(t) for t in range(int(self.x_ticks[0]), last + 1, step)]
        self.y_ticks = nice_ticks(low, high if high > low else low + 1, 5)
        self.parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                      f'font-family="sans-serif" font-size="11">', f'<rect width="{width}" height="{height}" '
                      f'fill="white"/>', f'<text class="title" x="{width / 2:.0f}" y="20" text-anchor="middle" '
                      f'font-size="13">{escape(title)}</text>']
        bottom = height - self.bottom
        for t in self.x_ticks:
            x = self.sx(t)
            self.parts += [f'<line x1="{x:.1f}" y1="{self.top}" x2="{x:.1f}" y2="{bottom}" stroke="#ececec"/>',
                           f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{_label(t)}</text>']
        for t in self.y_ticks:
            y = self.sy(t)
            self.parts += [f'<line x1="{self.left}" y1="{y:.1f}" x2="{width - self.right}" y2="{y:.1f}" '
                           f'stroke="#ececec"/>',
                           f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end">{_label(t)}</text>']
        middle = (self.top + bottom) / 2
        self.parts += [f'<line x1="{self.left}" y1="{bottom}" x2="{width - self.right}" y2="{bottom}" stroke="black"/>',
                       f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{bottom}" stroke="black"/>',
                       f'<text x="{(self.left + width - self.right) / 2:.0f}" y="{height - 6}" '
                       f'text-anchor="middle">{escape(x_label)}</text>',
                       f'<text x="14" y="{middle:.0f}" text-anchor="middle" transform="rotate(-90 14 {middle:.0f})">'
                       f'{escape(y_label)}</text>']

    def sx(self, x: float) -> float:
        x0, x1 = self.x_ticks[0], self.x_ticks[-1]
        return self.left + (x - x0) / (x1 - x0) * (self.width - self.left - self.right)

    def sy(self, y: float) -> float:
        y0, y1 = self.y_ticks[0], self.y_ticks[-1]
        y = min(max(y, y0), y1)
        return self.top + (y1 - y) / (y1 - y0) * (self.height - self.top - self.bottom)

    def line(self, points: list[tuple[float, float]], colour: str, width: float = 1.2, css: str = "") -> None:
        if points:
            text = " ".join(f"{self.sx(x):.1f},{self.sy(y):.1f}" for x, y in points if math.isfinite(y))
            self.parts.append(f'<polyline class="{css}" points="{text}" fill="none" stroke="{colour}" '
                              f'stroke-width="{width}"/>')

    def dot(self, x: float, y: float, colour: str, css: str = "") -> None:
        if math.isfinite(y):
            self.parts.append(f'<circle class="{css}" cx="{self.sx(x):.1f}" cy="{self.sy(y):.1f}" r="3" '
                              f'fill="{colour}"/>')

    def mark(self, x: float, colour: str, css: str = "") -> None:
        """A tick above the x axis: a trial that has no value to plot (pruned)."""
        y = self.height - self.bottom
        self.parts.append(f'<line class="{css}" x1="{self.sx(x):.1f}" y1="{y - 8}" x2="{self.sx(x):.1f}" y2="{y}" '
                          f'stroke="{colour}" stroke-width="2"/>')

    def legend(self, entries: list[tuple[str, str]]) -> None:
        x = self.width - self.right - 4
        for text, colour in reversed(entries):
            self.parts.append(f'<text x="{x}" y="{self.top - 6}" text-anchor="end" fill="{colour}">'
                              f'{escape(text)}</text>')
            x -= 7 * len(text) + 14

    def svg(self) -> str:
        return "\n".join(self.parts + ["</svg>"]) + "\n"


def history_svg(complete: list[tuple[int, float]], pruned: list[int], maximize: bool, what: str) -> str:
    """The objective of each finished trial (dots), the best so far (a red line) and the pruned trials
    (grey ticks on the axis)."""
    numbers = [n for n, _ in complete] + pruned
    best, line = None, []
    for number, value in sorted(complete):
        if best is None or (value > best if maximize else value < best):
            if best is not None:
                line.append((number, best))  # a step: level until the trial that beat it
            best = value
            line.append((number, best))
    title = f"{what}, trial by trial" + (f" (best {best:.4g})" if best is not None else "")
    axes = Axes(title, "trial", what, [float(n) for n in numbers], [v for _, v in complete], whole_x=True)
    if line:
        axes.line(line + [(max(numbers), line[-1][1])], RED, 1.5, "best")
    for number, value in complete:
        axes.dot(number, value, BLUE, "complete")
    for number in pruned:
        axes.mark(number, GREY, "pruned")
    axes.legend([("● finished", BLUE), ("| pruned", GREY), ("— best so far", RED)])
    return axes.svg()


def curves_svg(curves: list[tuple[int, str, list[tuple[int, float]]]], best: int | None, what: str) -> str:
    """Each trial's readings against the step: the pruned grey, the finished blue, the best red."""
    xs = [float(step) for _, _, points in curves for step, _ in points]
    ys = [value for _, _, points in curves for _, value in points]
    axes = Axes(f"{what} at each reading", "step", what, xs, ys)
    for number, state, points in sorted(curves, key=lambda c: (c[0] == best, c[1] != "pruned")):
        if number == best:
            axes.line(points, RED, 2.0, "best")
        else:
            axes.line(points, GREY if state == "pruned" else BLUE, 1.0, state)
    axes.legend([("finished", BLUE), ("pruned", GREY), ("best", RED)])
    return axes.svg()


def importances_svg(importances: dict[str, float]) -> str:
    """One bar per setting: its share of what decided the objective (Optuna's PED-ANOVA)."""
    names = list(importances)
    label_width = 8 + 7 * max((len(n) for n in names), default=4)
    width, bar_height, top = 560, 18, 40
    height = top + len(names) * (bar_height + 8) + 16
    room = width - label_width - 70
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text class="title" x="{width / 2:.0f}" y="20" text-anchor="middle" font-size="13">How much each '
             f'setting mattered</text>']
    for i, name in enumerate(names):
        y = top + i * (bar_height + 8)
        share = max(0.0, float(importances[name]))
        parts += [f'<text x="{label_width - 6}" y="{y + 13}" text-anchor="end">{escape(name)}</text>',
                  f'<rect class="bar" x="{label_width}" y="{y}" width="{share * room:.1f}" height="{bar_height}" '
                  f'fill="{BLUE}"/>',
                  f'<text x="{label_width + share * room + 6:.1f}" y="{y + 13}">{share:.0%}</text>']
    return "\n".join(parts + ["</svg>"]) + "\n"
