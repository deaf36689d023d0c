"""Refuse a request locally when the engine's capabilities say the engine would refuse it.

Which field of which request is bounded by, or needs, which limit or profile (`REQUEST_LIMITS`)
is a fact of the compiled contract: each request message declares its rows in a `request_limit`
option, and `openengine.contract` reads them. Everything about the limits themselves (defaults,
model scoping) comes from the contract through a `CapabilityReport`.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any, Iterable, Iterator

from google.protobuf.descriptor import FieldDescriptor

from openengine.contract import NumberDomain, RequestLimit, catalogue, number_domains
from openengine.validate._capabilities import CapabilityReport
from openengine.validate._tables import MODEL_SCOPED
from openengine.validate._rules import Severity, Violation, violation


# The rows live on the request messages (the `request_limit` option), read by the contract.
REQUEST_LIMITS: tuple[RequestLimit, ...] = catalogue().request_limits

_BY_REQUEST: dict[str, list[RequestLimit]] = {}
for _row in REQUEST_LIMITS:
    _BY_REQUEST.setdefault(_row.request, []).append(_row)


def _values(msg, path: str) -> list[Any]:
    """The values at `path` that the request sets (empty when it sets none)."""
    if not path:
        return [msg]
    head, _, oneof = path.partition("|")
    current = [msg]
    for part in [p for p in head.split(".") if p]:
        each = part.endswith("[]")
        name = part[:-2] if each else part
        nxt = []
        for m in current:
            value = getattr(m, name)
            if each:
                nxt.extend(value)
                continue
            field = m.DESCRIPTOR.fields_by_name[name]
            if field.is_repeated:
                if len(value):
                    nxt.append(value)
            elif field.has_presence:
                if m.HasField(name):
                    nxt.append(value)
            elif value:
                nxt.append(value)
        current = nxt
    if oneof:
        current = [m.WhichOneof(oneof) for m in current]
        current = [v for v in current if v is not None]
    return current


def _model_token_limits(request, model, report: CapabilityReport) -> Iterator[Violation]:
    """A GenerateRequest against the model's own token limits (ModelInfo.max_output_tokens and
    max_context_length, not profile limits)."""
    info = report.models.get(model) if model is not None else None
    if info is None or request.DESCRIPTOR.name != "GenerateRequest":
        return
    stopping = request.stopping
    asked = stopping.max_tokens if stopping.HasField("max_tokens") else None
    if asked is not None and info.max_output_tokens and asked > info.max_output_tokens:
        yield violation("OEV401", "stopping.max_tokens", asked,
                        f"<= {info.max_output_tokens} (ModelInfo.max_output_tokens of {model})",
                        f"stopping.max_tokens is {asked}, above the output limit "
                        f"{info.max_output_tokens} of model {model!r}")
    if request.WhichOneof("input") == "token_ids" and info.max_context_length:
        prompt = len(request.token_ids.ids)
        total = prompt + (asked or 0)
        if total > info.max_context_length:
            yield violation("OEV401", "token_ids", total,
                            f"<= {info.max_context_length} (ModelInfo.max_context_length of {model})",
                            f"{prompt} prompt tokens plus {asked or 0} output tokens exceed the context "
                            f"of {info.max_context_length} tokens of model {model!r}")


# The domains of the request numbers that have one (REQ-SVC-005), by the field's full name, from
# the fields' `number_domain` options; for a map field the domain is that of its values. Every
# other float or double field of a request is only required to be finite.
NUMBER_DOMAINS: dict[str, NumberDomain] = number_domains()

# Map fields whose keys are token ids: each must be below the model's vocabulary size.
TOKEN_ID_KEYS = frozenset(name for name, domain in NUMBER_DOMAINS.items() if domain.token_id_keys)

_FLOATS = (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE)
# Engine-specific extras (`extra`, `attributes_struct`) are outside the portable contract: an engine
# may ignore them, so their numbers are not judged here.
_OPAQUE = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})


def _numbers(msg, prefix: str = "") -> Iterator[tuple[str, FieldDescriptor, Any, Any]]:
    """Every number a message sets that the checks look at, found by walking its descriptor: (path,
    field, map key or None, value) for each float or double value (singular, repeated or map
    value) and for each key of a token-id map."""
    for field, value in msg.ListFields():
        path = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.full_name in _OPAQUE:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key in value:
                shown = key[:SHOWN_CHARS] + "..." if isinstance(key, str) and len(key) > SHOWN_CHARS else key
                if field.full_name in TOKEN_ID_KEYS or value_field.type in _FLOATS:
                    yield f"{path}[{shown}]", field, key, value[key]
                elif value_field.message_type is not None:
                    yield from _numbers(value[key], f"{path}[{shown}].")
        elif field.type in _FLOATS:
            if field.is_repeated:
                for i, item in enumerate(value):
                    yield f"{path}[{i}]", field, None, item
            else:
                yield path, field, None, value
        elif field.message_type is not None:
            if field.is_repeated:
                for i, item in enumerate(value):
                    yield from _numbers(item, f"{path}[{i}].")
            else:
                yield from _numbers(value, f"{path}.")


def number_violations(request, *, vocab_size: int = 0) -> list[Violation]:
    """Every number in `request` (any request message) that no engine may accept (REQ-SVC-005): a
    float or double that is NaN or infinite, a value outside its field's domain (NUMBER_DOMAINS),
    and a token-id key at or above `vocab_size` (0: the vocabulary size is not known). At most
    PROBLEMS_LISTED are listed, then one violation counting the rest."""
    return capped(_number_problems(request, vocab_size))


def _number_problems(request, vocab_size: int) -> Iterator[Violation]:
    for path, field, key, value in _numbers(request):
        if key is not None and field.full_name in TOKEN_ID_KEYS and vocab_size and key >= vocab_size:
            yield violation("OEV408", path, key, f"a token id below {vocab_size} (the vocabulary size)",
                       f"{path}: token id {key} is outside the vocabulary of {vocab_size} tokens")
        if not isinstance(value, float):
            continue
        if not math.isfinite(value):
            yield violation("OEV407", path, str(value), "a finite number",
                       f"{path} is {value}; every number in a request must be finite")
            continue
        domain = NUMBER_DOMAINS.get(field.full_name)
        if domain is not None and not domain.contains(value):
            yield violation("OEV408", path, value, f"within {domain}",
                       f"{path} is {value:g}, outside its domain {domain}")


# A refusal lists this many problems and counts the rest, so what a client is told (and what an
# engine sends back) does not grow with the request.
PROBLEMS_LISTED = 8
SHOWN_CHARS = 64


def capped(found: Iterable[Violation]) -> list[Violation]:
    """The first PROBLEMS_LISTED of `found`, then, when there are more, one violation counting
    them per rule (with the rule, path and expectation of the first error among them)."""
    listed: list[Violation] = []
    more: Counter[str] = Counter()
    first_more: Violation | None = None
    for v in found:
        if len(listed) < PROBLEMS_LISTED:
            listed.append(v)
            continue
        more[v.rule_id] += 1
        if first_more is None or (first_more.severity is not Severity.ERROR and v.severity is Severity.ERROR):
            first_more = v
    if first_more is not None:
        total = sum(more.values())
        rules = ", ".join(f"{count} x {rule}" for rule, count in sorted(more.items()))
        listed.append(violation(first_more.rule_id, first_more.path, total, first_more.expected,
                                f"and {total} more problems not listed ({rules}); the first is at "
                                f"{first_more.path}"))
    return listed


def _shown(value: Any) -> Any:
    """A request's own text, shortened so a message quoting it stays small."""
    if isinstance(value, (str, bytes)) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} long)"
    return repr(value) if isinstance(value, (str, bytes)) else value


def preflight(request, capabilities: CapabilityReport) -> list[Violation]:
    """Every reason the engine described by `capabilities` would refuse `request` (a
    GenerateRequest, EmbedRequest, ClassifyRequest, ScoreRequest or EncodeRequest), each naming
    the field and the limit, and every number no engine may accept (`number_violations`). An
    empty list means: send it. At most PROBLEMS_LISTED are listed, then one violation counting
    the rest."""
    report = getattr(capabilities, "report", capabilities)
    model = getattr(request, "model", "") or (next(iter(report.models)) if len(report.models) == 1 else None)
    info = report.models.get(model) if model is not None else None
    return capped(itertools.chain(_number_problems(request, getattr(info, "vocab_size", 0)),
                                  _model_token_limits(request, model, report),
                                  _limit_problems(request, model, report)))


# Fields the proposal adds to upstream's messages take numbers from this one up (upstream's own
# growth stays below it), so a field at or above it is one an upstream-only engine lacks.
FIRST_PROPOSAL_NUMBER = 100


def _proposal_field(request, path: str) -> bool:
    """Whether the first field of `path` is one the proposal added to the request message."""
    name = path.partition("|")[0].split(".")[0].removesuffix("[]")
    field = request.DESCRIPTOR.fields_by_name.get(name)
    return field is not None and field.number >= FIRST_PROPOSAL_NUMBER


def _limit_problems(request, model: str | None, report: CapabilityReport) -> Iterator[Violation]:
    """The request against its `request_limit` rows."""
    rows = _BY_REQUEST.get(request.DESCRIPTOR.name, ())
    refused_profiles: set[str] = set()
    for row in rows:
        values = _values(request, row.field)
        if row.check == "enabled" and row.when is None:
            values = [v for v in values if v]    # an explicit false or zero asks for nothing
        if not values:
            continue
        path = row.field.replace("[]", "").replace("|", ".").strip(".") or request.DESCRIPTOR.name
        if row.profile in refused_profiles:
            continue
        why = None   # the request needs a profile the engine lacks
        if report.upstream_only:
            if row.profile != catalogue().core and _proposal_field(request, row.field):
                why = "; the engine serves upstream OpenEngine v1 alone, which has no such field"
            elif row.profile != catalogue().core or row.check == "profile" \
                    or report.effective(row.profile, row.limit, model=model) is None:
                continue    # nothing the engine reports says whether it would accept this
        elif not report.advertised(row.profile):
            why = ", which the engine does not advertise"
        if why is not None:
            refused_profiles.add(row.profile)
            yield violation("OEV403", path, None, f"{row.profile} advertised",
                            f"{path} needs {row.profile}{why}")
            continue
        if not report.upstream_only and row.profile in MODEL_SCOPED and model is not None and model in report.models \
                and row.profile not in report.models[model].profiles:
            refused_profiles.add(row.profile)
            yield violation("OEV405", path, model, f"{row.profile} listed by model {model}",
                            f"{path} needs {row.profile}, which model {model!r} does not list")
            continue
        if row.check == "profile":
            continue
        limit = report.effective(row.profile, row.limit, model=model)
        name = f"{row.profile}.{row.limit}"
        for value in values:
            if row.check in ("at_most", "below_needs") and (limit or row.check == "at_most") and value > limit:
                yield violation("OEV401", path, value, f"<= {limit} ({name})",
                                f"{path} is {value}, above {name} = {limit}")
            elif row.check == "count_at_most":
                if len(value) > limit:
                    yield violation("OEV401", path, len(value), f"<= {limit} ({name})",
                                    f"{path} has {len(value)} elements, above {name} = {limit}")
            elif row.check == "enabled":
                if (row.when is None or value == row.when) and not limit:
                    shown = row.when or value
                    yield violation("OEV402", path, shown, f"{name} = true",
                                    f"{path} needs {name}, which the engine advertises as false")
            elif row.check == "ignored":
                if not limit:
                    yield violation("OEV406", path, value, f"{name} = true",
                                    f"{path} is ignored: the engine advertises {name} = false")
            elif row.check == "member":
                wanted = row.when or value
                if wanted not in limit:
                    yield violation("OEV404", path, _shown(wanted), f"one of {limit} ({name})",
                                    f"{path} uses {_shown(wanted)}, which {name} does not list")
            elif row.check == "below_needs" and limit and value < limit \
                    and not report.effective(row.profile, row.when, model=model):
                needed = f"{row.profile}.{row.when}"
                yield violation("OEV402", path, value, f"{needed} = true",
                                f"{path} below the native size {limit} needs {needed}")
