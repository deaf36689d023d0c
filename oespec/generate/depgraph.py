"""The profile dependency picture as a Graphviz graph (DOT); the site build draws it with `dot`.

Graphviz's layered layout keeps every node inside the drawing and labels apart for any catalogue.
Left to right: the mandatory core first, each profile right of what it requires, arrows pointing
at the prerequisite; incompatible pairs joined by dashed red lines outside the layout. Each node
links to its profile page (site/hooks.py makes the link relative). Same registry, same text.
"""

from __future__ import annotations

from typing import Callable

from oespec.registry import Profile, Registry

FONT = "Helvetica,Arial,sans-serif"
# Fill and border per stability, so experimental and deprecated profiles stand out.
STYLES = {
    "stable": ('"#e8eaf6"', '"#3f51b5"'),
    "experimental": ('"#fff8e1"', '"#ef6c00"'),
    "deprecated": ('"#eeeeee"', '"#757575"'),
}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _node(profile: Profile, url: str) -> str:
    fill, border = STYLES[profile.stability]
    detail = f"{profile.version} · {'mandatory' if profile.mandatory else profile.stability}"
    attrs = {
        "label": _quote(f"{profile.name}\n{detail}"),
        "URL": _quote(url),
        "tooltip": _quote(f"{profile.name} {profile.version} ({profile.stability}): {profile.summary}"),
        "fillcolor": fill,
        "color": border,
    }
    if profile.stability == "deprecated":
        attrs["style"] = '"rounded,filled,dashed"'
    return f"  {_quote(profile.name)} [{', '.join(f'{k}={v}' for k, v in attrs.items())}];"


def render_dot(registry: Registry, page_of: Callable[[Profile], str], *, header: str = "") -> str:
    """The DOT text of the dependency picture; `page_of(profile)` is its page, docs-relative."""
    known = {p.name for p in registry.profiles}
    lines = [header.rstrip()] if header else []
    lines += [
        "digraph profiles {",
        f'  graph [rankdir=LR, ranksep=0.7, nodesep=0.22, pad=0.1, bgcolor=transparent, fontname="{FONT}",',
        '         tooltip="Profile dependencies"];',
        f'  node [shape=box, style="rounded,filled", fontname="{FONT}", fontsize=14, margin="0.16,0.07"];',
        '  edge [color="#3f51b5", arrowsize=0.8, penwidth=1.3];',
    ]
    lines += [_node(p, page_of(p)) for p in registry.profiles]
    for p in registry.profiles:
        for req in p.requires:
            if req.profile in known:
                # Drawn from the prerequisite so it ranks first (left); the arrow points back at it.
                lines.append(f"  {_quote(req.profile)} -> {_quote(p.name)} "
                             f"[dir=back, tooltip={_quote(f'{p.name} requires {req.profile} {req.range}')}];")
    for p in registry.profiles:
        for inc in p.incompatible_with:
            if inc.profile in known:
                lines.append(f"  {_quote(p.name)} -> {_quote(inc.profile)} "
                             '[dir=none, style=dashed, color="#c62828", constraint=false, '
                             f"tooltip={_quote(f'{p.name} and {inc.profile} cannot be combined')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
