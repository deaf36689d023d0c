"""mkdocs hooks that join the hand-written spec and the generated reference into one site.

- The docs dir is `spec/`; the pages `oespec generate` writes under `site/generated/` are added
  as if they were in it (a generated page may not share a path with a spec page).
- Navigation entries `oespec:NAME` in mkdocs.yml are replaced by the page list NAME of
  `site/generated/nav.yml`, so a new profile or proto file appears without editing mkdocs.yml.
- The JSON Schemas (`schemas/*.schema.json` and the registry's own schema) are published under
  `/schemas/`, so a client in any language can fetch the one it validates against.
- Every numbered requirement of a spec page (`**REQ-LOAD-003** *(wire)* ...`) gets an anchor,
  `#req-load-003`, which the generated pages link to.

- Under `mkdocs serve` (`make serve`), every rebuild first regenerates the pages from
  profiles.yaml and the protos, so an edit to the registry shows up live like an edit to the spec.
  `make site` never writes: it builds what is committed, and `make check` says when that is stale.

The repository root is the folder that holds the docs dir; tests point the docs dir elsewhere to
build a site from other inputs.
"""

from __future__ import annotations

import logging
from pathlib import Path

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.oespec")

GENERATED = Path("site") / "generated"
NAV_FILE = "nav.yml"
NAV_PREFIX = "oespec:"


def _generated_dir(config) -> Path:
    return Path(config["docs_dir"]).resolve().parent / GENERATED


def _expand(entries, lists: dict, where: str):
    out = []
    for entry in entries:
        if isinstance(entry, str) and entry.startswith(NAV_PREFIX):
            name = entry[len(NAV_PREFIX):]
            if name not in lists:
                raise PluginError(f"mkdocs.yml nav: {entry!r} names no page list of {where} "
                                  f"(known: {', '.join(sorted(lists)) or 'none'}); run `make generate`")
            out.extend(lists[name] or [])
        elif isinstance(entry, dict):
            out.append({title: _expand(value, lists, where) if isinstance(value, list) else value
                        for title, value in entry.items()})
        else:
            out.append(entry)
    return out


_serving = False


def on_startup(command: str, dirty: bool) -> None:
    global _serving
    _serving = command == "serve"


def _regenerate(root: Path) -> None:
    """Rewrite the generated pages (and generated regions) from the current registry and protos."""
    from codegen.check import run_rules
    from codegen.diagnostics import Severity
    from codegen.generate import GenerationError, write_outputs
    from codegen.pipeline import plan
    from codegen.registry import SourceError, load_registry

    try:
        resolved = load_registry(root / "profiles.yaml", display_path="profiles.yaml")
    except SourceError as err:
        log.warning("profiles.yaml not regenerated: %s", err)
        return
    errors = [d for d in run_rules(resolved) if d.severity >= Severity.ERROR]
    if resolved.registry is None or errors:
        for d in errors[:10]:
            log.warning("%s:%s:%s: %s %s", d.path, d.line, d.column, d.rule_id, d.message)
        log.warning("the registry has errors; the site shows the pages generated last")
        return
    try:
        outputs = plan(resolved.registry, root, only=["proto", "docs"])
    except GenerationError as err:
        log.warning("pages not regenerated: %s", err)
        return
    docs = [o for o in outputs if not o.path.startswith("proto/")]
    for path in write_outputs(root, docs):
        log.info("regenerated %s", path)


def on_config(config):
    if _serving:
        _regenerate(Path(config["docs_dir"]).resolve().parent)
    nav_file = _generated_dir(config) / NAV_FILE
    if config["nav"] is None:
        return config
    lists = yaml.safe_load(nav_file.read_text(encoding="utf-8")) if nav_file.is_file() else {}
    config["nav"] = _expand(config["nav"], lists or {}, nav_file.as_posix())
    return config


def on_files(files: Files, config) -> Files:
    root = _generated_dir(config)
    if not root.is_dir():
        raise PluginError(f"{root}: no generated pages; run `make generate`")
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name == NAV_FILE or path.name.startswith("."):
            continue
        src_uri = path.relative_to(root).as_posix()
        clash = files.get_file_from_path(src_uri)
        if clash is not None:
            raise PluginError(f"generated page {src_uri} has the same path as spec/{src_uri}; "
                              "rename the spec page")
        files.append(File.generated(config, src_uri, abs_src_path=str(path)))
    _add_schemas(files, config)
    return files


# JSON Schemas published under /schemas/ for clients and editors in any language: the generated
# schemas of the proto3 JSON mapping, and the schema of profiles.yaml itself.
SCHEMA_SOURCES = (("schemas", "*.schema.json"), ("codegen/registry", "profiles.schema.json"))


def _add_schemas(files: Files, config) -> None:
    root = Path(config["docs_dir"]).resolve().parent
    for folder, pattern in SCHEMA_SOURCES:
        for path in sorted((root / folder).glob(pattern)):
            src_uri = f"schemas/{path.name}"
            if files.get_file_from_path(src_uri) is None:
                files.append(File.generated(config, src_uri, abs_src_path=str(path)))


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.generated_by is not None:
        return markdown
    try:
        from codegen.spec import parse_markdown
    except ImportError:
        return markdown
    found, _ = parse_markdown(markdown, page.file.src_uri)
    if not found:
        return markdown
    lines = markdown.split("\n")
    for req in found:
        index = req.line - 1
        line = lines[index]
        at = line.find(f"**{req.id}**")
        if at < 0:
            continue
        anchor = req.id.lower()
        lines[index] = f'{line[:at]}<a id="{anchor}" class="oe-req" href="#{anchor}">**{req.id}**</a>{line[at + len(req.id) + 4:]}'
    return "\n".join(lines)
