"""The profile dependency picture, drawn as SVG by a small layered layout (no external renderer).

Profiles are boxes in layers: a profile sits one layer below the deepest profile it requires, so
the mandatory core is on top. Prerequisites are solid arrows from a profile up to what it
requires; incompatibilities between two profiles are dashed red lines. Within a layer, boxes are
ordered by the mean position of their prerequisites (a few barycentre sweeps), ties by name, so
the same registry always gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from codegen.registry import Profile, Registry

BOX_HEIGHT = 44
LAYER_GAP = 76            # between layers: room for the curves
ROW_GAP = 34              # between the rows one wide layer wraps into
BOX_GAP = 56              # wide enough for an arrow from the next row to pass between two boxes
PER_ROW = 3               # a wider layer wraps into two rows, never more (see layout)
MARGIN = 24
LEGEND_HEIGHT = 40
CHAR_WIDTH = 7.4          # average advance of the 13px sans-serif used for names
FONT = "-apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


@dataclass(frozen=True)
class Node:
    name: str
    label: str
    sublabel: str
    layer: int
    row: int              # which row of its layer (a wide layer wraps)
    x: float
    y: float
    width: float
    mandatory: bool
    layer_top: float      # y of the first row of its layer: edges leave the layer there

    @property
    def centre(self) -> float:
        return self.x + self.width / 2


def layers(registry: Registry) -> dict[str, int]:
    """Profile name -> layer (0 for profiles with no known prerequisite). Cycles are cut."""
    known = {p.name: p for p in registry.profiles}
    depth: dict[str, int] = {}

    def visit(name: str, stack: tuple[str, ...]) -> int:
        if name in depth:
            return depth[name]
        prereqs = [r.profile for r in known[name].requires if r.profile in known and r.profile not in stack]
        value = 1 + max((visit(p, stack + (name,)) for p in prereqs), default=-1)
        depth[name] = value
        return value

    for profile in registry.profiles:
        visit(profile.name, ())
    return depth


def _order(registry: Registry, depth: dict[str, int]) -> list[list[Profile]]:
    rows: list[list[Profile]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for profile in registry.profiles:
        rows[depth[profile.name]].append(profile)
    for row in rows:
        row.sort(key=lambda p: (not p.mandatory, p.name))
    position = {p.name: i for row in rows for i, p in enumerate(row)}
    for _ in range(4):
        for row in rows[1:]:
            def centre(p: Profile) -> float:
                ups = [position[r.profile] for r in p.requires if r.profile in position]
                return sum(ups) / len(ups) if ups else float(position[p.name])
            row.sort(key=lambda p: (centre(p), p.name))
            position.update({p.name: i for i, p in enumerate(row)})
    return rows


def layout(registry: Registry) -> tuple[list[Node], float, float]:
    """Boxes with positions, and the drawing's width and height.

    A layer wider than PER_ROW boxes wraps into two rows; the second is shifted by half a box, so
    its boxes stand under the gaps of the first and their arrows pass between boxes.
    """
    depth = layers(registry)
    rows = _order(registry, depth)
    width_of = [max(len(p.name), len(_sublabel(p))) * CHAR_WIDTH + 28 for p in registry.profiles]
    box = round(max(width_of, default=120.0), 1)
    step = box + BOX_GAP
    # Two rows at most: a third row would stand under the first, and its arrows would cross it.
    per_row = [max(PER_ROW, -(-len(row) // 2)) for row in rows]
    wrapped = [[row[i:i + n] for i in range(0, len(row), n)] or [[]] for row, n in zip(rows, per_row)]
    span = 0.0
    for chunks in wrapped:
        for j, chunk in enumerate(chunks):
            span = max(span, (j % 2) * step / 2 + len(chunk) * box + max(len(chunk) - 1, 0) * BOX_GAP)
    total_width = max(2 * MARGIN + span, 420.0)
    nodes: list[Node] = []
    y = float(MARGIN)
    for layer, chunks in enumerate(wrapped):
        layer_top = y
        first = chunks[0]
        first_width = len(first) * box + max(len(first) - 1, 0) * BOX_GAP
        left = (total_width - first_width - (step / 2 if len(chunks) > 1 else 0)) / 2
        for j, chunk in enumerate(chunks):
            shift = (j % 2) * step / 2
            for i, profile in enumerate(chunk):
                nodes.append(Node(profile.name, profile.name, _sublabel(profile), layer, j,
                                  round(left + shift + i * step, 1), y, box, profile.mandatory, layer_top))
            y += BOX_HEIGHT + ROW_GAP
        y += LAYER_GAP - ROW_GAP
    height = y - LAYER_GAP + MARGIN + LEGEND_HEIGHT
    return nodes, round(total_width, 1), float(round(height, 1))


def _sublabel(profile: Profile) -> str:
    words = [f"v{profile.version}", str(profile.scope)]
    if profile.mandatory:
        words.append("mandatory")
    if profile.deprecated:
        words.append("deprecated")
    return " · ".join(words)


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def render_svg(registry: Registry, *, header: str = "") -> str:
    nodes, width, height = layout(registry)
    by_name = {n.name: n for n in nodes}
    out = [header] if header else []
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{_fmt(width)}" height="{_fmt(height)}" '
               f'viewBox="0 0 {_fmt(width)} {_fmt(height)}" role="img" aria-labelledby="oe-deps-title">')
    out.append('<title id="oe-deps-title">OpenEngine profile dependencies: solid arrows point to a '
               'required profile, dashed red lines join incompatible profiles</title>')
    out.append('<defs><marker id="oe-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
               'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#37474f"/>'
               '</marker></defs>')
    out.append(f'<rect x="0" y="0" width="{_fmt(width)}" height="{_fmt(height)}" fill="#ffffff"/>')

    for edge in _route(registry, by_name):
        if edge.kind == "requires":
            out.append(f'<path class="requires" d="{edge.d}" fill="none" stroke="#37474f" stroke-width="1.6" '
                       f'marker-end="url(#oe-arrow)"><title>{escape(edge.title)}</title></path>')
        else:
            out.append(f'<path class="incompatible" d="{edge.d}" fill="none" stroke="#d32f2f" '
                       f'stroke-width="1.6" stroke-dasharray="6 4"><title>{escape(edge.title)}</title></path>')

    for node in nodes:
        fill, stroke = ("#e3f2fd", "#1565c0") if node.mandatory else ("#f5f5f5", "#546e7a")
        out.append(f'<g class="profile" data-profile={quoteattr(node.name)}>')
        out.append(f'<rect x="{_fmt(node.x)}" y="{_fmt(node.y)}" width="{_fmt(node.width)}" height="{BOX_HEIGHT}" '
                   f'rx="6" fill="{fill}" stroke="{stroke}" stroke-width="1.4"/>')
        cx = node.x + node.width / 2
        out.append(f'<text x="{_fmt(cx)}" y="{_fmt(node.y + 19)}" text-anchor="middle" font-family="{FONT}" '
                   f'font-size="13" font-weight="600" fill="#212121">{escape(node.label)}</text>')
        out.append(f'<text x="{_fmt(cx)}" y="{_fmt(node.y + 35)}" text-anchor="middle" font-family="{FONT}" '
                   f'font-size="11" fill="#546e7a">{escape(node.sublabel)}</text>')
        out.append("</g>")

    # Legend along the bottom.
    ly = height - MARGIN - 8
    out.append(f'<g class="legend" font-family="{FONT}" font-size="12" fill="#424242">')
    out.append(f'<path d="M{MARGIN},{_fmt(ly)} L{MARGIN + 40},{_fmt(ly)}" stroke="#37474f" stroke-width="1.6" '
               f'marker-end="url(#oe-arrow)"/>')
    out.append(f'<text x="{MARGIN + 48}" y="{_fmt(ly + 4)}">requires</text>')
    out.append(f'<path d="M{MARGIN + 130},{_fmt(ly)} L{MARGIN + 170},{_fmt(ly)}" stroke="#d32f2f" '
               f'stroke-width="1.6" stroke-dasharray="6 4"/>')
    out.append(f'<text x="{MARGIN + 178}" y="{_fmt(ly + 4)}">incompatible with</text>')
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


@dataclass(frozen=True)
class Edge:
    kind: str          # "requires" or "incompatible"
    d: str             # SVG path data
    title: str


def _route(registry: Registry, by_name: dict[str, Node]) -> list[Edge]:
    """Paths for every prerequisite and every two-profile incompatibility.

    An edge between layers leaves the top of the lower box and enters the bottom of the upper
    one; edges arriving at (or leaving) the same box get their own evenly spaced points, ordered
    by where the other end is, so they fan out instead of meeting in one point.
    """
    wanted: list[tuple[str, Node, Node, str]] = []
    for profile in registry.profiles:
        for req in profile.requires:
            if req.profile in by_name and req.profile != profile.name:
                wanted.append(("requires", by_name[profile.name], by_name[req.profile],
                               f"{profile.name} requires {req.profile} {req.range}"))
    drawn: set[tuple[str, str]] = set()
    for profile in registry.profiles:
        for inc in profile.incompatible_with:
            if not inc.profile or inc.profile not in by_name or inc.profile == profile.name:
                continue
            pair = tuple(sorted((profile.name, inc.profile)))
            if pair in drawn:
                continue
            drawn.add(pair)
            reasons = "; ".join(i.reason for i in _reasons(registry, pair))
            a, b = by_name[pair[0]], by_name[pair[1]]
            lower, upper = (a, b) if (a.layer, a.row) > (b.layer, b.row) else (b, a)
            wanted.append(("incompatible", lower, upper,
                           f"{pair[0]} and {pair[1]} are incompatible" + (f": {reasons}" if reasons else "")))

    between = [w for w in wanted if w[1].layer != w[2].layer]
    arrive: dict[str, list[int]] = {}
    leave: dict[str, list[int]] = {}
    for index, (_, low, up, _) in enumerate(between):
        arrive.setdefault(up.name, []).append(index)
        leave.setdefault(low.name, []).append(index)
    in_x: dict[int, float] = {}
    out_x: dict[int, float] = {}
    for name, indexes in arrive.items():
        node = by_name[name]
        indexes.sort(key=lambda i: (between[i][1].centre, between[i][0]))
        for k, i in enumerate(indexes):
            in_x[i] = node.x + node.width * (0.15 + 0.7 * (k + 1) / (len(indexes) + 1))
    for name, indexes in leave.items():
        node = by_name[name]
        indexes.sort(key=lambda i: (in_x[i], between[i][0]))
        spread = min(10.0 * (len(indexes) - 1), node.width / 3)
        for k, i in enumerate(indexes):
            out_x[i] = node.centre - spread / 2 + (spread * k / (len(indexes) - 1) if len(indexes) > 1 else 0)

    edges: list[Edge] = []
    for index, (kind, low, up, title) in enumerate(between):
        x1, y1 = out_x[index], low.y
        x2, y2 = in_x[index], up.y + BOX_HEIGHT
        d = f"M{_fmt(x1)},{_fmt(y1)}"
        if low.y > low.layer_top:      # a wrapped row: rise between the boxes of the rows above first
            y1 = low.layer_top
            d += f" L{_fmt(x1)},{_fmt(y1)}"
        bend = (y1 - y2) / 2
        d += f" C{_fmt(x1)},{_fmt(y1 - bend)} {_fmt(x2)},{_fmt(y2 + bend)} {_fmt(x2)},{_fmt(y2)}"
        edges.append(Edge(kind, d, title))
    for kind, a, b, title in wanted:
        if a.layer != b.layer:
            continue
        left, right = (a, b) if (a.row, a.x) < (b.row, b.x) else (b, a)
        if left.row == right.row and right.x - (left.x + left.width) <= BOX_GAP + 1:   # neighbours
            y = left.y + BOX_HEIGHT / 2
            d = f"M{_fmt(left.x + left.width)},{_fmt(y)} L{_fmt(right.x)},{_fmt(y)}"
        else:                           # an arc under the boxes between them
            x1, x2 = left.centre, right.centre
            y1, y2 = left.y + BOX_HEIGHT, right.y + BOX_HEIGHT
            dip = min(ROW_GAP - 4, 14 + (x2 - x1) / 20)
            d = (f"M{_fmt(x1)},{_fmt(y1)} C{_fmt(x1)},{_fmt(max(y1, y2) + dip)} "
                 f"{_fmt(x2)},{_fmt(max(y1, y2) + dip)} {_fmt(x2)},{_fmt(y2)}")
        edges.append(Edge(kind, d, title))
    return edges


def _reasons(registry: Registry, pair: tuple[str, str]):
    for profile in registry.profiles:
        for inc in profile.incompatible_with:
            if inc.profile and tuple(sorted((profile.name, inc.profile))) == pair:
                yield inc
