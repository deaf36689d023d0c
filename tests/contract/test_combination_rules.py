"""`combination_problems` on arbitrary advertised sets and limit values: leaving a limit out
means its default, a list of names means the current versions, and the validators' two entry
points agree.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openengine.contract import catalogue, combination_problems
from openengine.v1 import capabilities_pb2
from openengine.validate import check_capabilities, document_from_json, validate_capabilities

CAT = catalogue()
NAMES = [p.name for p in CAT.profiles]
ROOT = Path(__file__).resolve().parents[2]


def _as_found(problems):
    return [(p.profile, p.rule, p.prerequisite.profile, p.values) if p.prerequisite is not None
            else (p.profile, p.rule, p.incompatibility.reason, p.values) for p in problems]


def _candidate_values(lim):
    """Values that make conditions on `lim` hold and fail: the default, each declared operand and
    its neighbours."""
    operands = [c.value for p in CAT.profiles for inc in p.incompatible_with for c in inc.when
                if c.reference == lim.reference]
    if lim.repeated:
        return [[], list(lim.default or []), *[[v] for v in operands]]
    if lim.kind == "bool":
        return [True, False]
    values = [lim.default, *operands]
    if lim.kind in ("int", "uint", "double"):
        values += [v + d for v in operands if isinstance(v, (int, float)) for d in (-1, 1)]
    return [v for v in values if v is not None] or [lim.default]


VERSIONS = st.sampled_from([(1, 0), (1, 3), (0, 9), (2, 0), [(1, 0), (2, 0)], [(0, 9)]])


@st.composite
def situations(draw):
    names = draw(st.sets(st.sampled_from(NAMES)))
    advertised = {}
    for name in names:
        version = draw(st.one_of(st.just(CAT.profile(name).version), VERSIONS))
        advertised[name] = version
    limits = {}
    for name in draw(st.sets(st.sampled_from(NAMES))):
        profile = CAT.profile(name)
        chosen = draw(st.sets(st.sampled_from([lim.name for lim in profile.limits]))) if profile.limits else set()
        limits[name] = {lim: draw(st.sampled_from(_candidate_values(profile.limit(lim)))) for lim in chosen}
    return advertised, limits


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(situations())
def test_a_left_out_limit_is_judged_on_its_default(situation):
    advertised, limits = situation
    complete = {p.name: {**p.defaults(), **limits.get(p.name, {})} for p in CAT.profiles}
    assert _as_found(combination_problems(advertised, limits)) == _as_found(combination_problems(advertised, complete))


def test_a_plain_list_of_names_means_the_current_versions():
    names = ["openengine.load", "openengine.core"]
    assert _as_found(combination_problems(names)) == _as_found(
        combination_problems({n: CAT.profile(n).version for n in names}))
    assert [p.rule for p in combination_problems(["openengine.load"])] == ["requires"]


def test_the_hot_path_reports_what_the_full_report_reports():
    """`check_capabilities` leaves unset messages' defaults out of the limits it judges
    combinations on; `validate_capabilities` fills them in. Both find the same violations."""
    corpus = sorted((ROOT / "tests" / "data" / "validate" / "corpus").glob("*.json"))
    judged = 0
    for path in corpus:
        doc, bad = document_from_json(json.loads(path.read_text()))
        if bad or doc.capabilities is None:
            continue
        full = [(v.rule_id, v.path, v.message) for v in validate_capabilities(doc.capabilities).violations]
        assert [(v.rule_id, v.path, v.message) for v in check_capabilities(doc.capabilities)] == full, path.name
        judged += 1
    assert judged >= 30


def test_capability_messages_are_judged_in_contract_order():
    """The interpreter walks `ListFields()` (field-number order) and reports in that order; the
    contract order of the profiles is the same, so findings read in the order of the catalogue."""
    numbers = {f.name: f.number for f in capabilities_pb2.Capabilities.DESCRIPTOR.fields}
    fields = [p.capability_field for p in CAT.profiles if p.capability_field]
    assert fields == sorted(fields, key=numbers.__getitem__)
