"""Docs generator: the site's reference pages and the generated regions of the spec pages.

Everything a reader could otherwise copy by hand from the registry, the protos, the spec's
requirements and the rule catalogues is produced here, so the docs cannot drift: the pages under
`site/generated/`, the navigation they expand (`nav.yml`, see site/hooks.py) and the
`<!-- oespec:begin NAME -->` regions of `spec/*.md` (see `oespec.generate.markers`). All text from
the registry, the protos and the spec goes through `oespec.generate.mdsafe`; the template
environment refuses any other string.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable

import jinja2

from oespec.generate import GenerationContext, GenerationError, Output, Problem, RuleCatalogues, header
from oespec.generate import mdsafe, reports
from oespec.generate.markers import MarkerError, has_markers, rewrite
from oespec.generate.mdsafe import Md, anchor_id
from oespec.generate.protodoc import FileDoc, describe
from oespec.generate.requirements import spec_requirements
from oespec.spec import Requirement
from oespec.generate import templating
from oespec.generate.templating import make_environment
from oespec.registry import Limit, Profile, Registry, Version
from openengine.contractkit.locations import Loc
from openengine.contractkit.naming import streaming_shape
from openengine.contractkit.rules import RuleSpec

GENERATED_DIR = "site/generated"
SPEC_DIR = "spec"
# Page paths inside the site (relative to the docs root; generated ones live in GENERATED_DIR).
PROFILES = "reference/profiles"
PROTOCOL = "reference/protocol"
MATRIX_PAGE = f"{PROFILES}/index.md"
DEPENDENCIES_PAGE = f"{PROFILES}/dependencies.md"
DEPENDENCIES_DOT = f"{PROFILES}/dependencies.dot"
REQUIREMENTS_PAGE = "reference/requirements.md"
REQUIREMENT_CHECKS_PAGE = "reference/requirement-checks.md"
CHECK_RULES_PAGE = "reference/check-rules.md"
BREAKING_RULES_PAGE = "reference/breaking-rules.md"
VALIDATOR_RULES_PAGE = "reference/validator-rules.md"
CASES_PAGE = "reference/conformance-cases.md"
REPORTS_PAGE = reports.PAGE
ADDITIONS_PAGE = "reference/additions.md"
# Each rule family's page.
RULE_PAGES = {"check": CHECK_RULES_PAGE, "breaking": BREAKING_RULES_PAGE, "validator": VALIDATOR_RULES_PAGE,
              "conformance": CASES_PAGE}
OPTIONS_FILE = "options.proto"   # the custom options that annotate descriptors
NAV_FILE = "nav.yml"

STREAMING_WORDS = {"unary": "unary", "server": "server streaming", "client": "client streaming",
                   "bidi": "bidirectional streaming"}


# ----------------------------------------------------------------------------------------- model

def rule_anchor(rule: RuleSpec) -> str:
    """The anchor of a rule's row on its family's page (a conformance case's: `case-...`)."""
    return ("case-" if rule.family == "conformance" else "") + anchor_id(rule.id)


def breaking_legal(rule: RuleSpec) -> str:
    """What makes a breaking rule's change legal, as the breaking-rules table says it."""
    if rule.severity is not None:
        return f"never: always reported ({rule.severity})"
    return f"a {rule.bump} version bump of the profile" if rule.bump in ("major", "minor") else "any version"


@dataclass
class Site:
    """Everything the pages are made of, gathered once per generation."""

    registry: Registry
    protos: list[FileDoc]
    requirements: list[Requirement]
    spec_available: bool
    rules: RuleCatalogues
    sections: list[SpecSection] = field(default_factory=list)   # every headed section of the spec
    type_pages: dict[str, tuple[str, str]] = field(default_factory=dict)   # full name -> (page, anchor)
    # full message or enum name -> the profiles that require it, directly or through a field
    type_owners: dict[str, list[str]] = field(default_factory=dict)

    def checks(self, req_id: str) -> list[RuleSpec]:
        """The rules and cases that check a requirement (or one of its clauses, `REQ-CORE-010.2`),
        in the order check, breaking, validator, case. A requirement is checked by what checks any
        clause."""
        return self._checks_by_requirement.get(req_id, [])

    @cached_property
    def _checks_by_requirement(self) -> dict[str, list[RuleSpec]]:
        """Each requirement and clause id, with what cites it: every page asks for many ids."""
        index: dict[str, list[RuleSpec]] = {}
        for rule in (*self.rules.check, *(self.rules.breaking or ()), *(self.rules.validator or ()),
                     *(self.rules.cases or ())):
            # a clause id counts for its requirement too
            for req_id in dict.fromkeys(i for cited in rule.requirements
                                        for i in {cited, cited.split(".")[0]}):
                index.setdefault(req_id, []).append(rule)
        return index

    def requirement(self, req_id: str) -> Requirement | None:
        return next((r for r in self.requirements if r.id == req_id), None)


def profile_page_path(profile: Profile) -> str:
    return f"{PROFILES}/{profile.short_name}.md"


def protocol_page_path(proto_path: str) -> str:
    stem = posixpath.splitext(posixpath.basename(proto_path))[0]
    return f"{PROTOCOL}/{stem}.md"


# ---------------------------------------------------------------------------------------- inputs

def _load_protos(ctx: GenerationContext) -> list[FileDoc]:
    sources = ctx.proto_sources()
    return describe(ctx.compiled("docs")[0], set(sources)) if sources else []


def gather(ctx: GenerationContext) -> Site:
    if ctx.rules is None:
        raise GenerationError("docs", "the rule catalogues were not passed in; generate through "
                                      "oespec.generate_with_catalogues.plan (or `oespec generate`)")
    requirements = spec_requirements(ctx, "docs")   # None while the spec is absent
    site = Site(ctx.registry, _load_protos(ctx), requirements or [], requirements is not None, ctx.rules,
                sections=spec_sections(ctx))
    site.type_pages = {t.full_name: (protocol_page_path(f.path), anchor_id(t.full_name))
                       for f in site.protos for t in (*f.messages, *f.enums)}
    site.type_owners = type_owners(site)
    return site


def type_owners(site: Site) -> dict[str, list[str]]:
    """Which profiles require each message or enum: those that list it or use it in an RPC, and
    for a type only used inside others, the profiles of the messages that hold it."""
    package = site.registry.package
    full = lambda name: name if "." in name else f"{package}.{name}"  # noqa: E731
    owners: dict[str, list[str]] = {}

    def claim(name: str, profile: Profile) -> None:
        holders = owners.setdefault(full(name), [])
        if profile.name not in holders:
            holders.append(profile.name)

    # A capability message and the enums of its limits belong to their own profile, not to the
    # core whose Capabilities holds them.
    for p in site.registry.profiles:
        if p.capability is not None:
            owners[full(p.capability.message)] = [p.name]
        for limit in p.limits:
            if limit.type.base == "enum" and limit.type.enum_name:
                claim(limit.type.enum_name, p)
    for p in site.registry.profiles:
        for name in [m.name for m in p.messages] + [n for r in p.rpcs for n in (r.request, r.response)]:
            claim(name, p)
    fields = {m.full_name: [f.type for f in m.fields if f.is_reference]
              for f_ in site.protos for m in f_.messages}
    queue = list(owners)
    while queue:                   # breadth first, so a type takes the owners of its nearest holders
        holder = queue.pop(0)
        for inner in fields.get(holder, []):
            if inner not in owners:
                owners[inner] = list(owners[holder])
                queue.append(inner)
    return owners


CODE_SPAN = re.compile(r"`([^`]+)`")


def requirements_citing(site: Site, msg) -> list[Requirement]:
    """The requirements whose code spans name a message, or one of its fields when the
    requirement applies to a profile that owns the message."""
    owners = [site.registry.profile(n) for n in site.type_owners.get(msg.full_name, [])]
    relevant = {r.id for p in owners if p is not None for r in requirements_for(site, p)}
    field_names = {f.name for f in msg.fields}
    return [req for req in site.requirements for spans, words in [_code_words(req.text)]
            if msg.name in words or msg.full_name in spans or (req.id in relevant and words & field_names)]


@lru_cache(maxsize=4096)
def _code_words(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The names a requirement's code spans hold, whole and by last dotted part; computed once per
    text, since every message page asks about every requirement."""
    spans: set[str] = set()
    for span in CODE_SPAN.findall(text):
        spans.update(re.split(r"[^\w.]+", span))
    return frozenset(spans), frozenset({w.rsplit(".", 1)[-1] for w in spans} | spans)


# ------------------------------------------------------------------------------------- rendering

def _finalize(value: Any) -> str:
    """Only escaped Markdown (`Md`), numbers and versions may reach a page."""
    if isinstance(value, Md):
        return value
    if isinstance(value, (bool, int, float, Version)):
        return str(value)
    if value is None or isinstance(value, jinja2.Undefined):    # `x if cond` without an else
        return ""
    raise TypeError(f"docs template emits a raw {type(value).__name__} ({str(value)[:40]!r}); "
                    "pass it through a filter: md, cell, code or block")


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = make_environment(finalize=_finalize)
    env.filters.update(md=mdsafe.inline, cell=mdsafe.cell, block=mdsafe.block, code=mdsafe.code,
                       value=lambda v: mdsafe.code(format_value(v)))
    env.globals.update(header=lambda: Md(header("<!--")), STREAMING_WORDS=STREAMING_WORDS)
    return env


class Pages:
    """Link and formatting helpers bound to the page being rendered (links are relative)."""

    def __init__(self, site: Site, page: str):
        self.site = site
        self.page = page

    def href(self, target: str, anchor: str = "") -> str:
        rel = posixpath.relpath(target, posixpath.dirname(self.page) or ".")
        if rel == posixpath.basename(self.page) and anchor and target == self.page:
            return f"#{anchor}"
        return rel + (f"#{anchor}" if anchor else "")

    def link(self, text: Md, target: str, anchor: str = "") -> Md:
        return Md(f"[{text}]({self.href(target, anchor)})")

    def profile(self, name: str, *, code: bool = False, breakable: bool = False) -> Md:
        """A profile's name, linked to its page. `breakable` names may wrap after a dot (and at
        hyphens) but not inside a word, for narrow table columns."""
        if breakable and not code:
            parts = ".<wbr>".join(mdsafe.inline(part) for part in name.split("."))
            label = Md(f'<span class="oe-name">{parts}</span>')
        else:
            label = mdsafe.code(name) if code else mdsafe.inline(name)
        found = self.site.registry.profile(name)
        return label if found is None else self.link(label, profile_page_path(found))

    def type(self, name: str, *, short: bool = True) -> Md:
        """A message or enum name, linked to its reference entry when the protos define it."""
        full = name if "." in name else f"{self.site.registry.package}.{name}"
        found, shown = self.site.type_pages.get(full), mdsafe.code(name if short else full)
        return shown if found is None else self.link(shown, *found)

    def field_type(self, f) -> Md:
        """A proto field's type: scalars as code, messages and enums linked, maps as map<K, V>."""
        shown = self.type(f.type, short=False) if f.is_reference else mdsafe.code(f.type)
        if f.label == "map" and f.map_types:
            return Md(f"{mdsafe.code('map<' + f.map_types[0] + ',')} {shown}{mdsafe.code('>')}")
        if f.label in ("repeated", "optional"):
            return Md(f"{f.label} {shown}")
        return shown

    def requirement(self, req: Requirement, shown: str | None = None) -> Md:
        """A requirement (or, `shown`, one of its clauses) linked to where the spec states it."""
        return self.link(Md(f"**{shown or req.id}**"), req.file, req.anchor)

    def requirement_id(self, req_id: str) -> Md:
        """A requirement or clause id (`REQ-CORE-010.2`), linked to its requirement's anchor
        when the spec defines it."""
        req = self.site.requirement(req_id.split(".", 1)[0])
        known = req is not None and req_id in req.ids
        return self.requirement(req, req_id) if known else mdsafe.code(req_id)

    def checks(self, req_id: str, family: str | None = None) -> Md:
        """Links to what checks a requirement (of one rule family, or all), or a dash."""
        found = [c for c in self.site.checks(req_id) if family is None or c.family == family]
        return Md(", ".join(self.link(mdsafe.code(c.id), RULE_PAGES[c.family], rule_anchor(c))
                            for c in found)) if found else Md("—")

    def page_title(self, page: str) -> Md:
        title = next((s.title for s in self.site.sections if s.page == page),
                     posixpath.splitext(posixpath.basename(page))[0])    # a page's first heading
        return self.link(mdsafe.inline(title), page)

    def stated(self, where: Iterable) -> Md:
        """Links to where the spec states an element: its requirements, else its section; or a dash."""
        links = [self.requirement(w) if isinstance(w, Requirement) else
                 self.link(mdsafe.inline(w.title), w.page, w.anchor) for w in where]
        return Md(", ".join(links)) if links else Md("—")

    def reference(self, shown: str, target: tuple[str, str]) -> Md:
        """An element's name linked to its protocol reference entry."""
        return self.link(mdsafe.code(shown), *target)

    @staticmethod
    def anchor(anchor_id: str) -> Md:
        """An anchor a link can point at (ids are generated: lower-case words and hyphens)."""
        assert re.fullmatch(r"[a-z0-9-]+", anchor_id), anchor_id
        return Md(f'<a id="{anchor_id}"></a>')


def format_value(value: Any) -> str:
    """A registry value written as in the registry: JSON-like scalars and lists."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _range(limit: Limit) -> Md:
    lo, hi = limit.minimum, limit.maximum
    fmt = lambda v: mdsafe.inline(format_value(v))  # noqa: E731
    if lo is not None and hi is not None:
        return Md(f"{fmt(lo)}&nbsp;–&nbsp;{fmt(hi)}")
    if lo is not None:
        return Md(f"≥&nbsp;{fmt(lo)}")
    if hi is not None:
        return Md(f"≤&nbsp;{fmt(hi)}")
    return Md("—")


def _type(limit: Limit) -> Md:
    t = limit.type
    if t.base == "enum":
        words = ("repeated " if t.repeated else "") + f"enum {t.enum_name or ''}".rstrip()
        values = ", ".join(f"{mdsafe.code(v)} = {n}" for v, n in sorted(t.enum_wire.items(), key=lambda i: i[1]))
        return Md(f"{mdsafe.code(words)} ({values})" if values else mdsafe.code(words))
    return mdsafe.code(str(t))


def requirements_for(site: Site, profile: Profile) -> list[Requirement]:
    areas = profile.requirement_areas
    mention = re.compile(rf"(?<![\w.-]){re.escape(profile.name)}(?![\w-]|\.[A-Za-z])")
    return [r for r in site.requirements if r.area in areas or mention.search(r.text)]


def _reverse(site: Site, profile: Profile):
    """Profiles that require this one, and incompatibilities declared by other profiles against it."""
    required_by = [(p, req) for p in site.registry.profiles for req in p.requires if req.profile == profile.name]
    declared_elsewhere = [(p, inc) for p in site.registry.profiles if p.name != profile.name
                          for inc in p.incompatible_with if inc.profile == profile.name]
    return required_by, declared_elsewhere


def _declaration(name: str, m) -> tuple[str, str]:
    """An RPC's proto declaration, in its two halves: the call and what it returns."""
    return (f"rpc {name}({'stream ' if m.client_streaming else ''}{m.request})",
            f"returns ({'stream ' if m.server_streaming else ''}{m.response});")


def signature(rpc) -> str:
    """A registry RPC as a proto declaration, with its service as a comment."""
    call, result = _declaration(rpc.method, rpc)
    # A long declaration continues on a second line, so the block fits the page's column.
    joined = f"{call} {result}" if len(call) + len(result) < 72 else f"{call}\n    {result}"
    return f"// service {rpc.service}\n{joined}"


PATHS = {"matrix": MATRIX_PAGE, "dependencies": DEPENDENCIES_PAGE, "requirements": REQUIREMENTS_PAGE,
         "check_rules": CHECK_RULES_PAGE, "breaking_rules": BREAKING_RULES_PAGE,
         "validator_rules": VALIDATOR_RULES_PAGE, "cases": CASES_PAGE,
         "requirement_checks": REQUIREMENT_CHECKS_PAGE,
         "protocol": f"{PROTOCOL}/index.md", "dependencies_dot": DEPENDENCIES_DOT}


def method_signature(m) -> str:
    """A described method as a proto declaration."""
    return " ".join(_declaration(m.name, m))


def rpcs_by_service(registry: Registry) -> dict[str, list]:
    """Every RPC of the registry, by service in first-seen order, with its owning profile."""
    out: dict[str, list] = {}
    for owner, rpc in registry.all_rpcs():
        out.setdefault(rpc.service, []).append((owner, rpc))
    return out


def services_of(profile: Profile) -> list[str]:
    """Short names of the services a profile's RPCs belong to, in first-seen order."""
    return list(dict.fromkeys(rpc.service_short for rpc in profile.rpcs))


def _context(site: Site, page: str, **extra) -> dict:
    return dict(site=site, registry=site.registry, pages=Pages(site, page), limit_type=_type,
                limit_range=_range, requirements_for=lambda p: requirements_for(site, p),
                reverse=lambda p: _reverse(site, p), raw=mdsafe.raw, fence=mdsafe.fence,
                signature=signature, profile_page=profile_page_path, paths=PATHS,
                owners=site.registry.rpc_owner(), method_signature=method_signature, services_of=services_of,
                shape=lambda m: STREAMING_WORDS[streaming_shape(m.client_streaming, m.server_streaming)],
                anchor_id=anchor_id, rule_anchor=rule_anchor, breaking_legal=breaking_legal,
                requirements_citing=lambda m: requirements_citing(site, m),
                rpcs_by_service=lambda: rpcs_by_service(site.registry), **extra)


def render(template: str, site: Site, page: str, **extra) -> str:
    return environment().get_template(f"docs/{template}").render(**_context(site, page, **extra))


# ---------------------------------------------------------------------------------------- regions

# The regions a spec page may embed: of the site as a whole, and of one profile (`limits:NAME`).
SITE_REGIONS = ("profile-table", "profile-matrix", "dependency-graph", "check-rules", "breaking-rules",
                "requirements-index")
PROFILE_PARTS = ("summary", "rpcs", "messages", "limits", "prerequisites", "incompatibilities", "history",
                 "requirements")


def region_renderer(site: Site, page: str) -> Callable[[str], str | None]:
    """`NAME -> Markdown` for the regions a spec page may embed, None for unknown names."""

    def one(name: str) -> str | None:
        kind, _, arg = name.partition(":")
        if kind in SITE_REGIONS and not arg and (kind != "breaking-rules" or site.rules.breaking is not None):
            return render(f"regions/{kind}.md.j2", site, page)
        profile = site.registry.profile(arg) if kind in PROFILE_PARTS and arg else None
        return None if profile is None else render("regions/profile-part.md.j2", site, page, part=kind,
                                                   profile=profile)

    return one


def _spec_pages(ctx: GenerationContext) -> list[str]:
    """The spec's pages (none while there is no spec folder), root-relative."""
    return sorted(p.relative_to(ctx.root).as_posix() for p in (ctx.root / SPEC_DIR).rglob("*.md") if p.is_file())


# ------------------------------------------------------------------- what the proposal adds

@dataclass(frozen=True)
class SpecSection:
    """A headed section of a spec page: its heading's title and the lines up to the next heading."""

    page: str
    anchor: str
    title: str
    text: str


@dataclass(frozen=True)
class Added:
    """One element the proposal adds to upstream v1 (`oespec.upstream.additions`), as the additions
    page lists it."""

    element: Any                  # its kind, name, definition (proto text), parent and file
    shown: str                    # what the page prints: `Service/Method`, `Message.field`, ...
    reference: tuple[str, str]    # (page, anchor) of its protocol reference entry
    profiles: tuple[str, ...] = ()    # profiles that own it
    spec: tuple[Requirement | SpecSection, ...] = ()   # where the spec states it


def spec_sections(ctx: GenerationContext) -> list[SpecSection]:
    """Every headed section of every spec page, with the anchor the site gives its heading (the
    Markdown toc extension's, repeated titles numbered as it numbers them)."""
    from markdown.extensions.toc import slugify

    from oespec.markdown_blocks import fenced_lines

    sections = []
    for rel in _spec_pages(ctx):
        text = ctx.read(rel) or ""
        lines, fenced = text.splitlines(), fenced_lines(text)
        seen: dict[str, int] = {}
        heads = []    # (line number, anchor, title) of each heading
        for number, line in enumerate(lines, 1):
            heading = None if number in fenced else re.match(r"^(#{1,6}) +(.+?)\s*#*\s*$", line)
            if heading:
                title = re.sub(r"<[^>]+>", "", heading[2])
                slug = slugify(re.sub(r"[`*]", "", title), "-")
                count = seen.get(slug, 0)
                seen[slug] = count + 1
                heads.append((number, f"{slug}_{count}" if count else slug, title))
        for (start, anchor, title), (end, *_) in zip(heads, heads[1:] + [(len(lines) + 1,)]):
            body = "\n".join([title, *lines[start:end - 1]])
            sections.append(SpecSection(rel[len(SPEC_DIR) + 1:], anchor, title, body))
    return sections


def _where_stated(site: Site, names: tuple[str, ...], context: str = "") -> tuple:
    """The requirements whose code spans name one of `names` (and `context` too, when given: a
    field's message), else the spec section that does (one whose title names it first), else,
    with a `context`, the section that names the element alone."""
    def names_it(spans: frozenset[str], words: frozenset[str], context: str) -> bool:
        return any(n in spans or (n in words and (not context or context in words)) for n in names)

    found = [r for r in site.requirements if names_it(*_code_words(r.text), context)]
    if found:
        return tuple(found[:3])
    for within in dict.fromkeys((context, "")):
        matching = [s for s in site.sections if names_it(*_code_words(s.text), within)]
        titled = [s for s in matching if any(n in s.title for n in names)]
        if matching:
            return ((titled or matching)[0],)
    return ()


def _where_profile_is_stated(site: Site, profile: Profile) -> tuple:
    """Where the spec states a profile: the first requirement of each of its areas
    (`requirement_areas`); else the requirements that name it in code (`openengine.runtime-events`:
    a hyphenated name is one word here); else the section that does, one whose title names it."""
    first_of_area: dict[str, Requirement] = {}
    for r in site.requirements:
        if r.area in profile.requirement_areas:
            first_of_area.setdefault(r.area, r)
    if first_of_area:
        return tuple(first_of_area.values())[:3]
    spelled = f"`{profile.name}`"
    found = [r for r in site.requirements if spelled in r.text]
    if found:
        return tuple(found[:3])
    matching = [s for s in site.sections if spelled in s.text]
    titled = [s for s in matching if profile.name in s.title]
    return ((titled or matching)[0],) if matching else ()


def upstream_additions(ctx: GenerationContext, site: Site) -> dict[str, Any]:
    """What proto/ adds to the pinned upstream v1 (`oespec.upstream.additions`), each element with
    its protocol reference entry, its profiles and where the spec states it; `pin` is None without
    a pinned image. `options` are the custom options' messages (options.proto): descriptor
    annotations, never on the wire."""
    from oespec import upstream

    image = ctx.root / upstream.IMAGE
    if not image.is_file():
        return {"pin": None}
    try:
        pin = upstream.read_pin(ctx.root / upstream.PIN)
        fds = upstream.load_image(image)
    except upstream.UpstreamError as err:
        raise GenerationError("docs", f"{err.path}: {err.message}") from None
    found = upstream.additions(fds, ctx.compiled("docs")[0], set(ctx.proto_sources()), "proto")
    rpc_owner = site.registry.rpc_owner()
    short = lambda name: name.removeprefix(site.registry.package + ".")  # noqa: E731

    def reference(a) -> tuple[str, str]:
        target = a.name.split("/")[0] if a.kind == "rpc" else (a.parent if a.kind in ("field", "enum_value") else a.name)
        if target in site.type_pages:
            return site.type_pages[target]
        page = protocol_page_path(a.file[len("proto/"):])
        return (page, anchor_id(target)) if a.kind in ("service", "rpc") else (page, "")

    by_profile = {p.name: _where_profile_is_stated(site, p) for p in site.registry.profiles}

    def stated(element, names: tuple[str, ...], profiles: tuple[str, ...], context: str = ""):
        """Where the spec states the element; else its profile's section; else its file's mention."""
        own = _where_stated(site, names, context)
        fallback = next((by_profile[p] for p in profiles if by_profile.get(p)), ())
        return own or fallback or _where_stated(site, (element.file.rsplit("/", 1)[-1],))

    out: dict[str, Any] = {"services": [], "types": [], "extensions": [], "options": []}
    for a in found:
        name = short(a.name)
        if a.kind in ("service", "rpc"):
            owner = rpc_owner.get(a.name)
            profiles = (owner.name,) if a.kind == "rpc" and owner is not None else tuple(dict.fromkeys(
                o.name for n, o in rpc_owner.items() if n.startswith(a.name + "/")))
            names = (name, a.name) if a.kind == "service" else (name, a.name, name.split("/")[-1])
            out["services"].append(Added(a, name, reference(a), profiles, stated(a, names, profiles)))
        elif a.kind in ("message", "enum") and a.file.endswith("/" + OPTIONS_FILE):
            out["options"].append(Added(a, name, reference(a)))
        elif a.kind in ("message", "enum"):
            profiles = tuple(site.type_owners.get(a.name, ()))
            out["types"].append(Added(a, name, reference(a), profiles, stated(a, (name, a.name), profiles)))
        else:
            parent, leaf = short(a.parent), a.name.rsplit(".", 1)[-1]
            profiles = tuple(site.type_owners.get(a.parent, ()))
            out["extensions"].append(Added(a, f"{parent}.{leaf}", reference(a), profiles, stated(
                a, (f"{parent}.{leaf}", leaf), profiles, parent.rsplit(".", 1)[-1])))
    out["profiles"] = [(p, by_profile[p.name]) for p in site.registry.profiles]
    out["options_stated"] = [r for r in site.requirements if re.search(r"\boptions?\b", r.text, re.I)][:1]
    return {"pin": pin, **out}


# --------------------------------------------------------------------------------------- generate

def generate(ctx: GenerationContext) -> list[Output]:
    site = gather(ctx)
    out: list[Output] = []

    def page(path: str, template: str, **extra) -> None:
        out.append(Output(f"{GENERATED_DIR}/{path}", render(template, site, path, **extra)))

    for profile in site.registry.profiles:
        page(profile_page_path(profile), "profile.md.j2", profile=profile)
    page(MATRIX_PAGE, "profiles-index.md.j2")
    page(DEPENDENCIES_PAGE, "dependencies.md.j2")
    out.append(Output(f"{GENERATED_DIR}/{DEPENDENCIES_DOT}", templating.render(
        "docs/dependencies.dot.j2", registry=site.registry, page_of=profile_page_path)))
    page(f"{PROTOCOL}/index.md", "protocol-index.md.j2", page_of=protocol_page_path)
    for f in site.protos:
        page(protocol_page_path(f.path), "protocol-file.md.j2", file=f)
    for path in (REQUIREMENTS_PAGE, CHECK_RULES_PAGE, BREAKING_RULES_PAGE, VALIDATOR_RULES_PAGE, CASES_PAGE,
                 REQUIREMENT_CHECKS_PAGE):
        page(path, posixpath.basename(path) + ".j2")    # each page's template is named after it
    page(ADDITIONS_PAGE, "additions.md.j2", additions=upstream_additions(ctx, site))
    engine_reports = reports.load_reports(ctx.root)
    page(REPORTS_PAGE, "conformance-reports.md.j2", reports=engine_reports, date_shown=reports.date_shown,
         profiles=reports.profile_columns([p.name for p in site.registry.profiles], engine_reports),
         # the spec page that says what conforming means, linked only where the spec has it
         spec_page="conformance.md" if (ctx.root / SPEC_DIR / "conformance.md").is_file() else None)
    # the page lists mkdocs.yml expands (`oespec:profiles`, `oespec:protocol`), as YAML
    out.append(Output(f"{GENERATED_DIR}/{NAV_FILE}", templating.render(
        "docs/nav.yml.j2", registry=site.registry, profile_page=profile_page_path, files=site.protos,
        page_of=protocol_page_path)))

    problems, messages = [], []
    for rel in _spec_pages(ctx):
        text = ctx.read(rel)
        if text is None or not has_markers(text):
            continue
        page_path = rel[len(SPEC_DIR) + 1:]
        try:
            new = rewrite(text, rel, region_renderer(site, page_path))
        except MarkerError as err:
            problems.extend(err.diagnostics)
            messages.append(str(err))
            continue
        out.append(Output(rel, new))
    if problems:
        raise GenerationError("docs", "wrong generated-region markers:\n" + "\n".join(messages),
                              problems=[Problem(d.path, Loc(d.line, d.column), d.message, d.hint, d.rule_id)
                                        for d in problems])
    return out
