"""What a browser would build from HTML: its elements and attributes (for injection tests)."""

from __future__ import annotations

from html.parser import HTMLParser


class Scan(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.comments: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_comment(self, data):
        self.comments.append(data)

    def handle_data(self, data):
        self.text.append(data)


def scan(html: str) -> Scan:
    parser = Scan()
    parser.feed(html)
    parser.close()
    return parser


# Elements a rendered registry text never contains; a fragment (`strict`) not even layout ones.
ACTIVE = ("script", "img", "iframe", "style", "object", "embed", "form", "meta", "base")
LAYOUT = ("svg", "div", "b", "span")


def injected(html: str, *, strict: bool = True) -> list[str]:
    """Elements and attributes that only injected markup would produce."""
    found = []
    for tag, attrs in scan(html).elements:
        if tag in ACTIVE or (strict and tag in LAYOUT):
            found.append(tag)
        for name, value in attrs.items():
            if name.startswith("on"):
                found.append(f"{tag}[{name}]")
            if name in ("href", "src") and value and value.strip().lower().startswith(("javascript:", "data:")):
                found.append(f"{tag}[{name}={value}]")
    return found
