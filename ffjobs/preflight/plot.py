"""Bandwidth-vs-size plot as a PNG drawn with Pillow (matplotlib is not a dependency)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT = 800, 480
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 40, 60
COLORS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (148, 103, 189), (140, 86, 75)]
THRESHOLD_COLOR = (214, 39, 40)


def _size_label(size_bytes: float) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g}{unit}"
    return f"{size_bytes:g}"


def _nice_top(value: float) -> float:
    """A round axis maximum just above ``value``."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def plot_busbw(
    series: Mapping[str, Sequence[Mapping[str, Any]]],
    thresholds: Mapping[float, float],
    path: Path,
    title: str = "",
) -> Path:
    """Draw busbw (GB/s) against message size (log2 x axis), one line per series.

    ``series`` maps a label to sweep rows (``size_bytes``, ``busbw_gbps``); ``thresholds``
    maps a size in bytes to its minimum busbw, drawn as red ticks joined by a dashed line.
    """
    sizes = sorted(
        {row["size_bytes"] for rows in series.values() for row in rows} | set(thresholds)
    )
    values = [row["busbw_gbps"] for rows in series.values() for row in rows]
    values += list(thresholds.values())
    if not sizes:
        raise ValueError("nothing to plot")
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    pad = (hi - lo) * 0.04  # keep the end points off the frame
    lo, hi = lo - pad, hi + pad
    y_top = _nice_top(max(values) * 1.05 if values else 1.0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(size: float) -> float:
        return LEFT + (math.log2(size) - lo) / (hi - lo) * plot_w

    def y_of(value: float) -> float:
        return TOP + plot_h - value / y_top * plot_h

    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    draw.rectangle([LEFT, TOP, LEFT + plot_w, TOP + plot_h], outline="black")
    for i in range(6):  # y grid and labels
        value = y_top * i / 5
        y = y_of(value)
        draw.line([LEFT, y, LEFT + plot_w, y], fill=(225, 225, 225))
        draw.text((LEFT - 8, y), f"{value:g}", fill="black", font=font, anchor="rm")
    for size in sizes:  # x ticks at the measured sizes
        x = x_of(size)
        draw.line([x, TOP + plot_h, x, TOP + plot_h + 5], fill="black")
        draw.text((x, TOP + plot_h + 8), _size_label(size), fill="black", font=font, anchor="mt")
    draw.text(
        (LEFT + plot_w / 2, HEIGHT - 22),
        "message size (bytes, log scale)",
        fill="black",
        font=font,
        anchor="mm",
    )
    draw.text((12, TOP - 22), "busbw GB/s", fill="black", font=font)
    if title:
        draw.text((LEFT + plot_w / 2, 14), title, fill="black", font=font, anchor="mm")
    if thresholds:
        points = [(x_of(s), y_of(v)) for s, v in sorted(thresholds.items())]
        for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
            _dashed(draw, (x0, y0), (x1, y1), THRESHOLD_COLOR)
        for x, y in points:
            draw.line([x - 8, y, x + 8, y], fill=THRESHOLD_COLOR, width=3)
    legend_y = TOP + 8
    for index, (label, rows) in enumerate(series.items()):
        color = COLORS[index % len(COLORS)]
        points = [
            (x_of(r["size_bytes"]), y_of(r["busbw_gbps"]))
            for r in sorted(rows, key=lambda r: r["size_bytes"])
        ]
        if len(points) > 1:
            draw.line(points, fill=color, width=2)
        for x, y in points:
            draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=color)
        draw.line([LEFT + 10, legend_y, LEFT + 30, legend_y], fill=color, width=2)
        draw.text((LEFT + 36, legend_y), label, fill="black", font=font, anchor="lm")
        legend_y += 14
    if thresholds:
        draw.line([LEFT + 10, legend_y, LEFT + 30, legend_y], fill=THRESHOLD_COLOR, width=3)
        draw.text((LEFT + 36, legend_y), "minimum (profile)", fill="black", font=font, anchor="lm")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format="PNG")
    return path


def _dashed(
    draw: ImageDraw.ImageDraw,
    start: tuple[float, float],
    end: tuple[float, float],
    color: tuple[int, int, int],
    dash: float = 6.0,
) -> None:
    (x0, y0), (x1, y1) = start, end
    length = math.hypot(x1 - x0, y1 - y0)
    steps = max(1, int(length // dash))
    for i in range(0, steps, 2):
        a, b = i / steps, min(1.0, (i + 1) / steps)
        draw.line(
            [x0 + (x1 - x0) * a, y0 + (y1 - y0) * a, x0 + (x1 - x0) * b, y0 + (y1 - y0) * b],
            fill=color,
            width=1,
        )
