"""Small server-side SVG drawings (readable without JavaScript): a sparkline and a Gantt chart."""

from __future__ import annotations

from html import escape

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")


def sparkline(values: list[float], width: int = 120, height: int = 24) -> str:
    """A polyline of ``values`` (no axes); an empty drawing for fewer than two."""
    if len(values) < 2:
        return f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="no data yet"></svg>'
    low, high = min(values), max(values)
    span = high - low or 1.0
    step = width / (len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v - low) / span * (height - 4):.1f}"
                      for i, v in enumerate(values))
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="iteration time, last '
            f'{len(values)} iterations"><polyline fill="none" stroke="#4e79a7" stroke-width="1.5" '
            f'points="{points}"/></svg>')


def _lanes(rows: list[dict]) -> list[str]:
    """Compute first, then the channels in order, then passthrough, then anything else."""
    found = {row["lane"] for row in rows}
    channels = sorted((lane for lane in found if lane.startswith("ch")), key=lambda lane: int(lane[2:] or 0))
    first = [lane for lane in ("compute",) if lane in found]
    last = [lane for lane in ("passthrough",) if lane in found]
    return first + channels + last + sorted(found - {"compute", "passthrough"} - set(channels))


def gantt(rows: list[dict], title: str, horizon: float | None = None, width: int = 960) -> str:
    """Rows ``{"name", "lane", "start", "end"}`` (seconds) as one bar per row, one line per lane;
    colours by name, so the same op has the same colour in two charts."""
    if not rows:
        return f'<p class="muted">{escape(title)}: nothing to draw.</p>'
    lanes = _lanes(rows)
    end = horizon or max(row["end"] for row in rows) or 1.0
    left, lane_height, top = 90, 22, 22
    height = top + lane_height * len(lanes) + 24
    scale = (width - left - 10) / end
    names = sorted({row["name"] for row in rows})
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    parts = [f'<svg class="gantt" width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
             f'<text x="4" y="14" class="title">{escape(title)}</text>']
    for index, lane in enumerate(lanes):
        y = top + index * lane_height
        parts.append(f'<text x="4" y="{y + 15}" class="lane">{escape(lane)}</text>'
                     f'<line x1="{left}" x2="{width - 10}" y1="{y + lane_height}" y2="{y + lane_height}" '
                     'class="grid"/>')
    for row in rows:
        y = top + lanes.index(row["lane"]) * lane_height + 3
        x = left + row["start"] * scale
        w = max((row["end"] - row["start"]) * scale, 0.8)
        fill = "#d9d9d9" if row["lane"] == "compute" else colour[row["name"]]
        parts.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{lane_height - 6}" fill="{fill}" '
                     'stroke="#fff" stroke-width="0.5">'
                     f'<title>{escape(row["name"])}: {row["start"] * 1e3:.2f}–{row["end"] * 1e3:.2f} ms</title>'
                     '</rect>')
    for k in range(6):
        t = end * k / 5
        x = left + t * scale
        anchor = "end" if k == 5 else "start"
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" class="tick" text-anchor="{anchor}">'
                     f'{t * 1e3:.1f} ms</text>')
    parts.append("</svg>")
    return "".join(parts)
