"""Requests refused locally, naming the limit; the same requests pass when the limit allows."""

from __future__ import annotations

import pytest

from openengine.v1 import discovery_pb2, encoder_pb2, generation_pb2, tasks_pb2
from openengine.validate import REQUEST_LIMITS, preflight, validate_capabilities
from tests.validate.conftest import caps, profile


def report(*names, models=(), **core):
    msg = caps(*names)
    for key, value in core.items():
        if isinstance(value, list):
            getattr(msg.generation, key).extend(value)
        else:
            setattr(msg.generation, key, value)
    return validate_capabilities(msg, model_infos=models)


def gen(**sampling):
    req = generation_pb2.GenerateRequest(text="hi")
    for key, value in sampling.items():
        if key == "logit_bias":
            req.sampling.logit_bias[1] = 0.5
        elif key == "guided":
            setattr(req.sampling.guided, value, "x")
        else:
            setattr(req.sampling, key, value)
    return req


def found(request, rep):
    return [(v.rule_id, v.path) for v in preflight(request, rep)]


@pytest.mark.parametrize("request_,bad,good,expected", [
    (gen(logprobs=21), report(), report(max_logprobs=21), ("OEV401", "sampling.logprobs")),
    (gen(n=2), report(), report(max_sequences=2), ("OEV401", "sampling.n")),
    (gen(min_p=0.1), report(), report(min_p=True), ("OEV402", "sampling.min_p")),
    (gen(logit_bias=True), report(), report(logit_bias=True), ("OEV402", "sampling.logit_bias")),
    (gen(prompt_logprobs=1), report(), report(prompt_logprobs=True), ("OEV402", "sampling.prompt_logprobs")),
    (gen(guided="regex"), report(guided_decoding_modes=[1]), report(guided_decoding_modes=[3]),
     ("OEV404", "sampling.guided.constraint")),
])
def test_generate_limits(request_, bad, good, expected):
    assert found(request_, bad) == [expected]
    assert found(request_, good) == []


def test_token_ids_prompt_needs_token_ids_input():
    req = generation_pb2.GenerateRequest()
    req.token_ids.ids.append(5)
    assert found(req, report(token_ids_input=False)) == [("OEV402", "prompt")]
    assert found(req, report()) == []


def test_priority_is_a_warning_when_ignored():
    req = generation_pb2.GenerateRequest(text="x", priority=3)
    assert [str(v.severity) for v in preflight(req, report())] == ["warning"]
    assert preflight(req, report(priority=True)) == []


@pytest.mark.parametrize("field,profile_name", [
    ("adapter", "openengine.adapters"), ("session_id", "openengine.sessions"),
])
def test_features_need_their_profiles(field, profile_name):
    req = generation_pb2.GenerateRequest(text="x", **{field: "a"})
    assert found(req, report()) == [("OEV403", field)]
    assert found(req, report(profile_name)) == []


def test_kv_transfer_needs_kv():
    req = generation_pb2.GenerateRequest(text="x")
    req.kv_transfer.session_id = "s"
    assert found(req, report()) == [("OEV403", "kv_transfer")]
    assert found(req, report("openengine.kv")) == []


def test_kv_transfer_backend_must_be_advertised():
    req = generation_pb2.GenerateRequest(text="x")
    req.kv_transfer.backend = "nixl"
    advertised = caps("openengine.kv")
    advertised.kv.kv_transfer_backends.append("mooncake")
    assert found(req, validate_capabilities(advertised)) == [("OEV404", "kv_transfer.backend")]
    advertised.kv.kv_transfer_backends.append("nixl")
    assert found(req, validate_capabilities(advertised)) == []


def _tasks_model(name, tasks=("embed",), max_inputs=2):
    info = discovery_pb2.ModelInfo(model=name)
    info.capabilities.profiles.append(profile("openengine.tasks"))
    info.capabilities.tasks.supported_tasks.extend({"embed": 1, "classify": 2, "score": 3}[t] for t in tasks)
    info.capabilities.tasks.max_inputs_per_request = max_inputs
    return info


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
    other = discovery_pb2.ModelInfo(model="m")
    assert found(tasks_pb2.EmbedRequest(model="m"), report("openengine.tasks", models=[other])) == \
        [("OEV405", "EmbedRequest")]


def test_embed_dimensions_need_matryoshka():
    info = _tasks_model("m")
    info.capabilities.tasks.embedding_size = 1024
    req = tasks_pb2.EmbedRequest(model="m", dimensions=256)
    assert found(req, report("openengine.tasks", models=[info])) == [("OEV402", "dimensions")]
    info.capabilities.tasks.matryoshka = True
    assert found(req, report("openengine.tasks", models=[info])) == []
    req.dimensions = 2048
    assert found(req, report("openengine.tasks", models=[info])) == [("OEV401", "dimensions")]


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


def _model(max_context=0, max_output=0) -> discovery_pb2.ModelInfo:
    return discovery_pb2.ModelInfo(model="m", max_context_tokens=max_context, max_output_tokens=max_output)


def test_max_tokens_against_the_models_output_limit():
    req = generation_pb2.GenerateRequest(model="m", text="hi")
    req.sampling.max_tokens = 600
    assert found(req, report(models=[_model(max_output=512)])) == [("OEV401", "sampling.max_tokens")]
    assert found(req, report(models=[_model(max_output=600)])) == []
    assert found(req, report(models=[_model()])) == []          # a model that reports no limit


def test_token_ids_prompt_and_output_against_the_models_context():
    req = generation_pb2.GenerateRequest(model="m")
    req.token_ids.ids.extend(range(100))
    req.sampling.max_tokens = 30
    assert found(req, report(token_ids_input=True, models=[_model(max_context=120)])) == [("OEV401", "token_ids")]
    assert found(req, report(token_ids_input=True, models=[_model(max_context=130)])) == []


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


def test_logit_bias_keys_and_values():
    req = generation_pb2.GenerateRequest(text="x")
    req.sampling.logit_bias[3] = NAN
    req.sampling.logit_bias[4] = 150.0
    req.sampling.logit_bias[5] = -100.0
    req.sampling.logit_bias[300] = 1.0
    assert sorted(number_rules(req, vocab_size=256)) == [
        ("OEV407", "sampling.logit_bias[3]"), ("OEV408", "sampling.logit_bias[300]"),
        ("OEV408", "sampling.logit_bias[4]")]
    # Without a known vocabulary size the keys cannot be judged; the values still are.
    assert sorted(number_rules(req)) == [("OEV407", "sampling.logit_bias[3]"), ("OEV408", "sampling.logit_bias[4]")]


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
            elif f.message_type is not None and f.message_type.full_name not in seen:
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
    assert checked >= 8   # seven sampling floats (logit_bias included) and LimitUpdate.double_value


def test_preflight_reports_numbers_with_the_models_vocabulary():
    info = discovery_pb2.ModelInfo(model="m", max_context_tokens=100, max_output_tokens=10)
    info.tokenizer.vocab_size = 256
    rep = report(logit_bias=True, min_p=True, models=[info])
    req = gen(temperature=NAN)
    req.sampling.logit_bias[999] = 1.0
    assert sorted(found(req, rep)) == [("OEV407", "sampling.temperature"), ("OEV408", "sampling.logit_bias[999]")]


# -- bounded refusals ---------------------------------------------------------------------------------

def test_a_request_with_100000_bad_entries_gets_a_refusal_of_fixed_size():
    """Each out-of-range logit_bias id and value is a problem; the refusal lists the first few and
    counts the rest, so its size does not follow the request's."""
    from openengine.validate import PROBLEMS_LISTED, number_violations

    model = discovery_pb2.ModelInfo(model="m")
    model.tokenizer.vocab_size = 1000
    rep = report(models=[model], logit_bias=True)
    sizes = []
    for entries in (1_000, 100_000):
        request = generation_pb2.GenerateRequest(model="m", text="hi")
        request.sampling.logit_bias.update({1000 + token: 500.0 for token in range(entries)})  # id and value out
        judged = [preflight(request, rep)] + ([number_violations(request, vocab_size=1000)] if entries < 10_000 else [])
        for found in judged:
            assert len(found) == PROBLEMS_LISTED + 1
            assert [v.rule_id for v in found] == ["OEV408"] * (PROBLEMS_LISTED + 1)
            assert found[-1].value == 2 * entries - PROBLEMS_LISTED
            assert f"{2 * entries - PROBLEMS_LISTED} more problems" in found[-1].message
            sizes.append(sum(len(f"{v.message} {v.expected} {v.path} {v.value}") for v in found))
    assert max(sizes) < 2500 and sizes[0] <= sizes[-1] <= sizes[0] + 10   # grows by a digit or two, no more


def test_the_count_names_the_first_error_among_what_is_left_out():
    from openengine.validate import PROBLEMS_LISTED

    request = generation_pb2.GenerateRequest(text="hi", priority=1, adapter="a")
    for token in range(PROBLEMS_LISTED):
        request.sampling.logit_bias[token] = float("nan")
    found = preflight(request, report(logit_bias=True))
    assert [v.rule_id for v in found[:PROBLEMS_LISTED]] == ["OEV407"] * PROBLEMS_LISTED
    last = found[-1]     # left out: the priority warning (OEV406), then the adapter error (OEV403)
    assert last.rule_id == "OEV403" and last.path == "adapter" and last.value == 2
    assert "1 x OEV403, 1 x OEV406" in last.message


def test_a_long_string_from_the_request_is_quoted_short():
    rep = report("openengine.kv")
    request = generation_pb2.GenerateRequest(text="hi")
    request.kv_transfer.backend = "x" * 100_000
    found = [v for v in preflight(request, rep) if v.rule_id == "OEV404"]
    assert found and len(found[0].message) < 400 and "(100000 long)" in found[0].message
