"""Requests refused locally, naming the limit; the same requests pass when the limit allows."""

from __future__ import annotations

import pytest

from openengine.v1 import capabilities_pb2, encoder_pb2, generation_pb2, model_pb2, server_pb2, tasks_pb2
from openengine.validate import REQUEST_LIMITS, from_upstream, preflight, validate_capabilities
from tests.validate.conftest import caps, profile


def report(*names, models=(), infos=(), **core):
    msg = caps(*names)
    for key, value in core.items():
        if isinstance(value, list):
            getattr(msg.core, key).extend(value)
        else:
            setattr(msg.core, key, value)
    msg.models.extend(models)
    return validate_capabilities(msg, model_infos=infos)


def gen(**options):
    """A GenerateRequest; each option names its field in upstream's groups (`top_n` is the output
    candidates', `guided` a guide kind)."""
    req = generation_pb2.GenerateRequest(prompt="hi")
    for key, value in options.items():
        if key == "guided":
            setattr(req.guided, value, "x")
        elif key == "top_n":
            req.response.output_candidates.top_n = value
        elif key == "prompt_top_n":
            req.response.prompt_candidates.top_n = value
        elif key in generation_pb2.ResponseOptions.DESCRIPTOR.fields_by_name:
            setattr(req.response, key, value)
        elif key in generation_pb2.StoppingOptions.DESCRIPTOR.fields_by_name:
            setattr(req.stopping, key, value)
        else:
            setattr(req.sampling, key, value)
    return req


def found(request, rep):
    return [(v.rule_id, v.path) for v in preflight(request, rep)]


@pytest.mark.parametrize("request_,bad,good,expected", [
    (gen(top_n=21), report(), report(max_logprobs=21), ("OEV401", "response.output_candidates.top_n")),
    (gen(prompt_top_n=21), report(), report(max_logprobs=21), ("OEV401", "response.prompt_candidates.top_n")),
    (gen(num_sequences=2), report(), report(max_sequences=2), ("OEV401", "sampling.num_sequences")),
    (gen(min_p=0.1), report(), report(min_p=True), ("OEV402", "sampling.min_p")),
    (gen(return_output_logprobs=True), report(), report(output_logprobs=True),
     ("OEV402", "response.return_output_logprobs")),
    (gen(return_prompt_logprobs=True), report(), report(prompt_logprobs=True),
     ("OEV402", "response.return_prompt_logprobs")),
    (gen(guided="regex"), report(guided_decoding_modes=[1]), report(guided_decoding_modes=[2]),
     ("OEV404", "guided.guide")),
])
def test_generate_limits(request_, bad, good, expected):
    assert found(request_, bad) == [expected]
    assert found(request_, good) == []


def test_an_explicit_false_or_zero_asks_for_nothing():
    assert found(gen(return_output_logprobs=False, return_prompt_logprobs=False, min_p=0.0), report()) == []


def test_token_ids_prompt_needs_token_ids_input():
    req = generation_pb2.GenerateRequest()
    req.token_ids.ids.append(5)
    assert found(req, report(token_ids_input=False)) == [("OEV402", "input")]
    assert found(req, report()) == []


@pytest.mark.parametrize("field,profile_name", [
    ("lora_name", "openengine.adapters"), ("session_id", "openengine.sessions"),
])
def test_features_need_their_profiles(field, profile_name):
    req = generation_pb2.GenerateRequest(prompt="x", **{field: "a"})
    assert found(req, report()) == [("OEV403", field)]
    assert found(req, report(profile_name)) == []


def test_kv_session_needs_kv_and_an_advertised_backend():
    req = generation_pb2.GenerateRequest(prompt="x")
    req.kv.session.session_id = "s"
    assert found(req, report()) == [("OEV403", "kv.session")]
    assert found(req, report("openengine.kv")) == []
    req.kv.session.transfer_backend = "nixl"
    advertised = caps("openengine.kv")
    advertised.kv.kv_transfer_backends.append("mooncake")
    assert found(req, validate_capabilities(advertised)) == [("OEV404", "kv.session.transfer_backend")]
    advertised.kv.kv_transfer_backends.append("nixl")
    assert found(req, validate_capabilities(advertised)) == []


def _tasks_model(name, tasks=("embed",), max_inputs=2):
    entry = capabilities_pb2.ModelCapabilities(model=name)
    entry.profiles.append(profile("openengine.tasks"))
    entry.tasks.supported_tasks.extend({"embed": 1, "classify": 2, "score": 3}[t] for t in tasks)
    entry.tasks.max_inputs_per_request = max_inputs
    return entry


def test_tasks_need_the_profile_the_family_and_the_batch_limit():
    embed = tasks_pb2.EmbedRequest(model="m")
    embed.inputs.add(text="a")
    assert found(embed, report()) == [("OEV403", "EmbedRequest")]
    assert found(embed, report("openengine.tasks", models=[_tasks_model("m")])) == []
    assert found(embed, report("openengine.tasks", models=[_tasks_model("m", ("score",))])) == \
        [("OEV404", "EmbedRequest")]
    embed.inputs.add(text="b")
    embed.inputs.add(text="c")
    assert found(embed, report("openengine.tasks", models=[_tasks_model("m")])) == [("OEV401", "inputs")]
    other = capabilities_pb2.ModelCapabilities(model="m")
    assert found(tasks_pb2.EmbedRequest(model="m"), report("openengine.tasks", models=[other])) == \
        [("OEV405", "EmbedRequest")]


def test_embed_dimensions_need_matryoshka():
    entry = _tasks_model("m")
    entry.tasks.embedding_size = 1024
    req = tasks_pb2.EmbedRequest(model="m", dimensions=256)
    assert found(req, report("openengine.tasks", models=[entry])) == [("OEV402", "dimensions")]
    entry.tasks.matryoshka = True
    assert found(req, report("openengine.tasks", models=[entry])) == []
    req.dimensions = 2048
    assert found(req, report("openengine.tasks", models=[entry])) == [("OEV401", "dimensions")]


def test_score_and_classify():
    score = tasks_pb2.ScoreRequest(model="m")
    score.documents.add(text="a")
    assert found(score, report("openengine.tasks", models=[_tasks_model("m", ("score",))])) == []
    classify = tasks_pb2.ClassifyRequest(model="m")
    classify.inputs.add(text="a")
    assert found(classify, report("openengine.tasks", models=[_tasks_model("m", ("score",))])) == \
        [("OEV404", "ClassifyRequest")]


def test_encode_modalities_and_items():
    rep = report("openengine.encoder")
    req = encoder_pb2.EncodeRequest()
    req.items.add(item_id="1").image.SetInParent()
    assert found(req, rep) == [("OEV404", "items.item")]
    msg = caps("openengine.encoder")
    msg.encoder.modalities.append(1)
    assert found(req, validate_capabilities(msg)) == []


def test_table_names_only_registry_limits():
    from openengine.validate import DEFAULTS

    for row in REQUEST_LIMITS:
        assert row.profile in DEFAULTS
        if row.limit:
            assert row.limit in DEFAULTS[row.profile]


def _info(max_context=None, max_output=None) -> model_pb2.ModelInfo:
    info = model_pb2.ModelInfo(model_id="m")
    if max_context is not None:
        info.max_context_length = max_context
    if max_output is not None:
        info.max_output_tokens = max_output
    return info


def test_max_tokens_against_the_models_output_limit():
    req = generation_pb2.GenerateRequest(model="m", prompt="hi")
    req.stopping.max_tokens = 600
    assert found(req, report(infos=[_info(max_output=512)])) == [("OEV401", "stopping.max_tokens")]
    assert found(req, report(infos=[_info(max_output=600)])) == []
    assert found(req, report(infos=[_info()])) == []          # a model that reports no limit


def test_token_ids_prompt_and_output_against_the_models_context():
    req = generation_pb2.GenerateRequest(model="m")
    req.token_ids.ids.extend(range(100))
    req.stopping.max_tokens = 30
    assert found(req, report(infos=[_info(max_context=120)])) == [("OEV401", "token_ids")]
    assert found(req, report(infos=[_info(max_context=130)])) == []


def test_an_upstream_only_engine_is_held_to_what_its_answers_report():
    """Without GetCapabilities only ServerInfo and ModelInfo speak: a limit they report is applied,
    one they leave out is not guessed, and a field of the proposal is one such an engine lacks."""
    info = _info(max_output=64)
    info.generation.output_logprobs.max_top_n = 2
    rep = from_upstream(server_pb2.ServerInfo(instance_id="u", supported_models=["m"]), [info])
    req = gen(top_n=3, num_sequences=4, min_p=0.5, max_tokens=65)
    req.model = "m"
    assert sorted(found(req, rep)) == [("OEV401", "response.output_candidates.top_n"),
                                       ("OEV401", "stopping.max_tokens")]
    req.session_id = "s"
    req.lora_name = "a"
    assert ("OEV403", "session_id") in found(req, rep) and ("OEV403", "lora_name") not in found(req, rep)


# -- numbers no engine may accept (REQ-SVC-005) ----------------------------------------------------

INF, NAN = float("inf"), float("nan")


def number_rules(request, **kw):
    from openengine.validate import number_violations

    return [(v.rule_id, v.path) for v in number_violations(request, **kw)]


@pytest.mark.parametrize("field", ["temperature", "top_p", "min_p", "presence_penalty",
                                   "frequency_penalty", "repetition_penalty"])
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_every_sampling_float_must_be_finite(field, value):
    assert number_rules(gen(**{field: value})) == [("OEV407", f"sampling.{field}")]


@pytest.mark.parametrize("field, bad, good", [
    ("temperature", [-1.0, -0.001], [0.0, 1.0, 7.0]),
    ("top_p", [0.0, 7.0, -1.0], [0.5, 1.0]),
    ("min_p", [-0.1, 1.5], [0.0, 1.0]),
    ("presence_penalty", [-2.5, 3.0], [-2.0, 0.0, 2.0]),
    ("frequency_penalty", [-2.5, 3.0], [-2.0, 2.0]),
    ("repetition_penalty", [-3.0, 0.0], [0.5, 1.0, 2.0]),
])
def test_sampling_numbers_outside_their_domain_are_refused(field, bad, good):
    for value in bad:
        assert number_rules(gen(**{field: value})) == [("OEV408", f"sampling.{field}")], value
    for value in good:
        assert number_rules(gen(**{field: value})) == [], value


def test_every_float_field_of_every_request_message_is_walked():
    """The walk is generic: it finds a float or double field wherever a request message nests it,
    so a field added to a request later is covered without a table entry."""
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.message_factory import GetMessageClass

    from openengine.contract import catalogue

    floats = (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE)
    checked = 0

    def paths(md, prefix, seen):
        for f in md.fields:
            if f.type in floats:
                yield prefix + [f]
            elif f.message_type is not None and f.message_type.full_name not in seen \
                    and not f.message_type.full_name.startswith("google.protobuf."):   # extras: opaque
                yield from paths(f.message_type, prefix + [f], seen | {f.message_type.full_name})

    services = list(catalogue().services.values())
    for service in services:
        for method in service.methods:
            for path in paths(method.input_type, [], {method.input_type.full_name}):
                msg = GetMessageClass(method.input_type)()
                target = msg
                for f in path[:-1]:
                    if f.message_type.GetOptions().map_entry:   # map<..., float>: one entry's value
                        getattr(target, f.name)[1] = NAN
                        break
                    target = getattr(target, f.name).add() if f.is_repeated else getattr(target, f.name)
                else:
                    leaf = path[-1]
                    if leaf.is_repeated:
                        getattr(target, leaf.name).append(NAN)
                    else:
                        setattr(target, leaf.name, NAN)
                rules = number_rules(msg)
                assert [r for r, _ in rules] == ["OEV407"], (method.full_name, [f.name for f in path], rules)
                checked += 1
    assert checked >= 7   # six sampling doubles and LimitUpdate.double_value


def test_preflight_reports_numbers_and_limits_together():
    rep = report(infos=[_info(max_output=10)])
    req = gen(temperature=NAN, max_tokens=11)
    req.model = "m"
    assert sorted(found(req, rep)) == [("OEV401", "stopping.max_tokens"), ("OEV407", "sampling.temperature")]


# -- bounded refusals ---------------------------------------------------------------------------------

def test_a_request_with_100000_bad_entries_gets_a_refusal_of_fixed_size():
    """Each item of a kind the encoder does not take is a problem; the refusal lists the first few
    and counts the rest, so its size does not follow the request's."""
    from openengine.validate import PROBLEMS_LISTED

    rep = report("openengine.encoder")
    sizes = []
    for entries in (1_000, 100_000):
        request = encoder_pb2.EncodeRequest()
        for i in range(entries):
            request.items.add(item_id=str(i)).image.SetInParent()
        found = [v for v in preflight(request, rep)]
        assert len(found) == PROBLEMS_LISTED + 1
        assert {v.rule_id for v in found} <= {"OEV404", "OEV401"}
        assert f"{entries + 1 - PROBLEMS_LISTED} more problems" in found[-1].message
        sizes.append(sum(len(f"{v.message} {v.expected} {v.path} {v.value}") for v in found))
    assert max(sizes) < 2500 and sizes[0] <= sizes[-1] <= sizes[0] + 10   # grows by a digit or two, no more


def test_the_count_names_the_first_error_among_what_is_left_out():
    from openengine.validate import PROBLEMS_LISTED

    request = generation_pb2.GenerateRequest(prompt="hi", lora_name="a")
    request.stopping.conditions.add(stop_text="x")
    found = preflight(request, report())
    assert [v.rule_id for v in found] == ["OEV403"]
    request.sampling.temperature = NAN
    request.sampling.top_p = NAN
    request.sampling.min_p = NAN
    request.sampling.frequency_penalty = NAN
    request.sampling.presence_penalty = NAN
    request.sampling.repetition_penalty = NAN
    request.session_id = "s"
    request.kv.session.session_id = "k"
    found = preflight(request, report())
    assert len(found) == PROBLEMS_LISTED + 1
    last = found[-1]     # listed: six numbers, min_p switched off, lora_name; left out: two profiles
    assert last.rule_id == "OEV403" and last.path == "session_id" and last.value == 2
    assert "2 x OEV403" in last.message


def test_a_long_string_from_the_request_is_quoted_short():
    rep = report("openengine.kv")
    request = generation_pb2.GenerateRequest(prompt="hi")
    request.kv.session.transfer_backend = "x" * 100_000
    found = [v for v in preflight(request, rep) if v.rule_id == "OEV404"]
    assert found and len(found[0].message) < 400 and "(100000 long)" in found[0].message
