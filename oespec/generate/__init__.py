"""Generate stage: every file derived from profiles.yaml, computed in memory and written all at once.

A generator is a function `(GenerationContext) -> list[Output]`, registered in `GENERATORS` in the
order they run. The proto generator runs first; later generators (bindings, schemas,
docs) may read the proto sources it produced through the context. Nothing touches the disk until
every generator has succeeded; then `write_outputs` replaces each file atomically, and a failure
part-way restores what was there. `stale_outputs` compares without writing: `make check` uses it.
"""

from __future__ import annotations

import importlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from openengine.contractkit.rules import RuleCatalogue, RuleSpec
from oespec.registry import Registry

HEADER_TEXT = "generated from profiles.yaml by `oespec generate`, do not edit"


def header(comment: str = "//") -> str:
    """The first line of every committed generated file, in the file's comment syntax."""
    if comment == "<!--":
        return f"<!-- {HEADER_TEXT} -->\n"
    return f"{comment} {HEADER_TEXT}\n"


@dataclass(frozen=True)
class Output:
    path: str            # relative to the repository root, POSIX separators
    content: str | bytes
    committed: bool = True   # False for build outputs (Python bindings): never checked for staleness

    def data(self) -> bytes:
        return self.content.encode("utf-8") if isinstance(self.content, str) else self.content


@dataclass(frozen=True)
class Problem:
    """One located reason a generator cannot run: the file (the registry, or a proto) and position
    of what has to change."""

    path: str
    loc: Loc
    message: str
    hint: str = ""
    rule_id: str = ""   # the catalogued rule it breaks, when more precise than OE900 (a DOC marker rule)


class GenerationError(Exception):
    """A generator cannot produce its outputs; nothing has been written. `problems` locates each
    cause (all of them, not only the first) when the generator knows where they are."""

    def __init__(self, generator: str, message: str, *, problems: Sequence[Problem] = ()):
        super().__init__(f"{generator}: {message}")
        self.generator = generator
        self.message = message
        self.problems = tuple(problems)


_PROTOC_LINE = re.compile(r"^(?P<file>[^:\n]+\.proto):(?P<line>\d+):(?P<column>\d+): (?P<message>.+)$", re.M)


def protoc_problems(text: str, proto_dir: str = "proto") -> list[Problem]:
    """protoc's `file:line:col: message` lines as located problems."""
    return [Problem(f"{proto_dir}/{m['file']}", Loc(int(m["line"]), int(m["column"])), m["message"].strip(),
                    "fix the proto source; generation reads it as it will be after this run")
            for m in _PROTOC_LINE.finditer(text)]


@dataclass(frozen=True)
class RuleCatalogues:
    """The catalogue entries the docs print, each a `RuleSpec` (openengine.contractkit.rules), handed in by
    the caller: the generate stage never imports `oespec.check`, `oespec.breaking` or the runtime
    (`openengine`); `oespec.generate_with_catalogues`, part of the composition layer, supplies them from the one
    catalogue `oespec rules` lists."""

    check: tuple[RuleSpec, ...] = ()
    breaking: tuple[RuleSpec, ...] | None = None   # None: the breaking stage is not installed
    # The runtime's catalogues; None when the runtime cannot be imported (no Python bindings yet).
    validator: tuple[RuleSpec, ...] | None = None          # in id order
    python_only_validator_rules: frozenset = frozenset()   # ids a JSON Schema cannot express
    cases: tuple[RuleSpec, ...] | None = None              # conformance cases, in the order they run


@dataclass
class GenerationContext:
    registry: Registry
    root: Path
    outputs: list[Output] = field(default_factory=list)   # what earlier generators produced
    cache: dict = field(default_factory=dict)
    rules: RuleCatalogues | None = None

    def read(self, relpath: str) -> str | None:
        """A file as it will be after generation: a planned output, else what is on disk."""
        for out in reversed(self.outputs):
            if out.path == relpath and isinstance(out.content, str):
                return out.content
        try:
            return (self.root / relpath).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def proto_sources(self) -> dict[str, str]:
        """Every .proto under proto/ (path relative to proto/), with planned outputs overlaid."""
        sources: dict[str, str] = {}
        proto_root = self.root / "proto"
        # Once the proto generator has planned its files, generated files on disk that it no longer
        # produces are orphans about to be removed, not sources.
        regenerated = any(o.path.startswith("proto/") for o in self.outputs)
        if proto_root.is_dir():
            for path in sorted(proto_root.rglob("*.proto")):
                text = path.read_text(encoding="utf-8")
                if regenerated and HEADER_TEXT in text.split("\n", 1)[0]:
                    continue
                sources[path.relative_to(proto_root).as_posix()] = text
        for out in self.outputs:
            if out.path.startswith("proto/") and out.path.endswith(".proto") and isinstance(out.content, str):
                sources[out.path[len("proto/"):]] = out.content
        return sources

    def compiled(self, generator: str):
        """The contract as generation will leave it, compiled once and shared by every generator:
        (FileDescriptorSet with source info, Python modules by path). Raises `GenerationError`
        naming `generator` when protoc rejects the sources."""
        sources = self.proto_sources()
        key = ("compiled", tuple(sorted(sources.items())))
        if key not in self.cache:
            from oespec.protoc import ProtocError, compile_all

            try:
                self.cache[key] = compile_all(sources)
            except ProtocError as err:
                raise GenerationError(generator, f"the proto sources do not compile:\n{err.message}",
                                      problems=protoc_problems(err.message)) from None
        return self.cache[key]


# Ids `oespec generate` reports: a generator that cannot produce its outputs, and (with --check)
# a committed output that differs from what generation would write.
GENERATE_RULES = RuleCatalogue("generate", (
    RuleSpec("OE900", "generation-failed", "generate", "generation",
             "every generator produces its outputs (a failure is reported at its cause, and nothing is written)",
             Severity.ERROR),
    RuleSpec("OE901", "generated-stale", "generate", "generation",
             "every committed generated file is what `oespec generate` writes from the current sources",
             Severity.ERROR),
))

# Generator name -> "module:function", in run order. Each module adds its own line.
GENERATORS: dict[str, str] = {
    "proto": "oespec.generate.proto:generate",
    "bindings": "oespec.generate.bindings:generate",
    "jsonschemas": "oespec.generate.jsonschemas:generate",
    "docs": "oespec.generate.docs:generate",
    "requirements": "oespec.generate.requirements:generate",
}


def plan(registry: Registry, root: Path, *, only: list[str] | None = None,
         rules: RuleCatalogues | None = None) -> list[Output]:
    """Run the generators in memory and return every output; raises `GenerationError`.
    `rules` are the catalogues the docs print; `oespec.generate_with_catalogues.plan` passes them."""
    ctx = GenerationContext(registry, Path(root), rules=rules)
    for name, spec in GENERATORS.items():
        if only and name not in only:
            continue
        try:
            module_name, _, func = spec.partition(":")
            produced = getattr(importlib.import_module(module_name), func)(ctx)
        except GenerationError:
            raise
        except Exception as err:  # a generator bug must still leave the tree untouched
            raise GenerationError(name, f"{type(err).__name__}: {err}") from err
        ctx.outputs.extend(produced)
    paths = [o.path for o in ctx.outputs]
    dupes = sorted({p for p in paths if paths.count(p) > 1})
    if dupes:
        raise GenerationError("plan", f"two generators write {', '.join(dupes)}")
    return ctx.outputs


def _differs(root: Path, out: Output) -> bool:
    """Is the file on disk missing or other than what generation would write?"""
    path = Path(root) / out.path
    return not path.is_file() or path.read_bytes() != out.data()


def stale_outputs(root: Path, outputs: list[Output]) -> list[str]:
    """Committed outputs whose file on disk differs from what generation would write."""
    return [out.path for out in outputs if out.committed and _differs(root, out)]


def orphan_files(root: Path, outputs: list[Output], *, owned_dirs: tuple[str, ...] = (),
                 marked_dirs: tuple[str, ...] = ()) -> list[str]:
    """Files generation once wrote but no longer produces.

    `owned_dirs` are produced entirely by generation (build outputs): every file there that is not
    planned is an orphan. In `marked_dirs` (committed sources mixed with hand-written ones) only files
    whose first line is the generated header count, so a removed service leaves no stale file.
    """
    root = Path(root)
    wanted = {o.path for o in outputs}

    def unplanned(folder: str) -> list[Path]:
        files = sorted((root / folder).rglob("*")) if (root / folder).is_dir() else []
        return [p for p in files if p.is_file() and p.relative_to(root).as_posix() not in wanted]

    found = [p for d in owned_dirs for p in unplanned(d) if "__pycache__" not in p.parts]
    found += [p for d in marked_dirs for p in unplanned(d) if _has_header(p)]
    return [p.relative_to(root).as_posix() for p in found]


def _has_header(path: Path) -> bool:
    with path.open("rb") as fh:
        return HEADER_TEXT.encode("utf-8") in fh.readline()


def write_outputs(root: Path, outputs: list[Output], *, orphans: list[str] = ()) -> list[str]:
    """Write every output or none, then remove `orphans`. Returns the paths written.

    Each file is first written to a temporary sibling, then all are renamed into place; if any
    step fails, files already replaced are restored from their previous content.
    """
    root = Path(root)
    changed = [o for o in outputs if _differs(root, o)]
    temps: list[tuple[Path, Path]] = []
    backups: dict[Path, bytes | None] = {}
    try:
        for out in changed:
            target = root / out.path
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(out.data())
            temps.append((Path(tmp), target))
        for tmp, target in temps:
            backups[target] = target.read_bytes() if target.is_file() else None
            os.replace(tmp, target)
    except BaseException:
        for target, previous in backups.items():
            if previous is None:
                target.unlink(missing_ok=True)
            else:
                target.write_bytes(previous)
        for tmp, _ in temps:
            tmp.unlink(missing_ok=True)
        raise
    for orphan in orphans:
        (root / orphan).unlink(missing_ok=True)
    return [o.path for o in changed]
