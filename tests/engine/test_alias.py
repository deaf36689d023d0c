"""The compatibility aliases, driven by a client written against the earlier definitions: its
stubs are generated from the alias protos (proto/openengine/legacy/), and it never imports v1.
What it does shows up in v1, and what v1 does shows up through it (REQ-ALIAS-001..003)."""

from __future__ import annotations


import grpc
import pytest
from grpc_health.v1 import health_pb2

from openengine import aliases as alias
from openengine.legacy.rev2.v1 import openengine_pb2 as r2
from openengine.legacy.rev3.v1 import control_pb2 as r3
from openengine.legacy.services import control_service_pb2_grpc, openengine_service_pb2_grpc
from openengine.v1 import admin_pb2, generation_pb2, lifecycle_pb2, load_pb2

from tests.engine.conftest import AUTH, running

H = health_pb2.HealthCheckResponse
BOTH = ("openengine", "control")
LONG = 250   # tokens (the default model allows 256): surely still running while the test looks


class Earlier:
    """The earlier client: one stub per earlier service."""

    def __init__(self, channel):
        self.openengine = openengine_service_pb2_grpc.OpenEngineStub(channel)
        self.control = control_service_pb2_grpc.ControlStub(channel)


def running_generate(stub_call, request):
    """Start a streaming call and return it with its first message (so it is surely admitted)."""
    call = stub_call(request, timeout=30)
    return call, next(call)


def code_of(fn) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        fn()
    return err.value.code()


def wait_running(stubs, n, timeout=5.0):
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if stubs.observability.GetLoad(load_pb2.GetLoadRequest()).running_requests >= n:
            return True
        time.sleep(0.01)
    return False


def test_earlier_client_generates_and_its_work_is_counted_and_cancelled_through_v1():
    with running(profiles=("load", "admin"), aliases=BOTH, token_delay_ms=20) as (engine, stubs):
        old = Earlier(stubs.channel)
        call, first = running_generate(old.openengine.Generate, r2.GenerateRequest(
            request_id="earlier-1", prompt="hello from revision 2", sampling=r2.SamplingParams(max_tokens=LONG)))
        assert first.request_id == "earlier-1" and first.WhichOneof("event") == "token"
        # The same request, seen through v1 and through both aliases' GetLoad.
        assert stubs.observability.GetLoad(load_pb2.GetLoadRequest()).running_requests == 1
        assert old.openengine.GetLoad(r2.GetLoadRequest()).running_requests == 1
        assert old.control.GetLoad(r3.GetLoadRequest()).running_requests == 1
        # Cancelled through v1 Lifecycle/Abort: the earlier stream ends with its own error event.
        aborted = stubs.lifecycle.Abort(lifecycle_pb2.AbortRequest(request_ids={"values": ["earlier-1"]}))
        assert aborted.aborted == 1
        rest = list(call)
        assert rest[-1].WhichOneof("event") == "error"
        assert rest[-1].error.code == r2.ERROR_CODE_CANCELLED
        assert stubs.observability.GetLoad(load_pb2.GetLoadRequest()).running_requests == 0


def test_a_v1_request_is_cancelled_through_either_alias_abort():
    with running(profiles=("load",), aliases=BOTH, token_delay_ms=20) as (engine, stubs):
        old = Earlier(stubs.channel)
        for n, abort in enumerate((
                lambda rid: old.openengine.Abort(r2.AbortRequest(request_id=rid)),
                lambda rid: old.control.Abort(r3.AbortRequest(request_id=rid)))):
            rid = f"v1-{n}"
            call, _ = running_generate(stubs.inference.Generate, generation_pb2.GenerateRequest(
                request_id=rid, text="hello from v1", sampling=generation_pb2.SamplingParams(max_tokens=LONG)))
            answer = abort(rid)
            assert answer.status == 1  # ABORT_STATUS_ABORTED in both revisions
            last = list(call)[-1]
            assert last.WhichOneof("kind") == "error"
            # Nothing left to abort: each revision says so in its own words.
            again = abort(rid)
            assert again.status != 1


def test_alias_answers_equal_v1_answers_for_the_same_inputs():
    with running(profiles=("load",), aliases=BOTH) as (engine, stubs):
        old = Earlier(stubs.channel)
        v1_tokens = [t for m in stubs.inference.Generate(generation_pb2.GenerateRequest(
            text="same input", sampling=generation_pb2.SamplingParams(max_tokens=12, seed=7)))
            for t in (m.chunk.token_ids if m.HasField("chunk") else m.final.token_ids)]
        old_events = list(old.openengine.Generate(r2.GenerateRequest(
            prompt="same input", sampling=r2.SamplingParams(max_tokens=12, seed=7))))
        assert [t for e in old_events if e.HasField("token") for t in e.token.token_ids] == v1_tokens
        finished = old_events[-1]
        assert finished.finished.reason == r2.FINISH_REASON_LENGTH
        assert finished.usage.completion_tokens == 12
        assert finished.usage.total_tokens == finished.usage.prompt_tokens + 12
        info, model = stubs.info(), stubs.model()
        earlier = old.openengine.GetEngineInfo(r2.GetEngineInfoRequest())
        assert (earlier.instance_id, list(earlier.supported_models)) == (info.instance_id, list(info.served_models))
        assert earlier.role == r2.ENGINE_ROLE_AGGREGATED
        server = old.control.GetServerInfo(r3.GetServerInfoRequest())
        assert server.engine_role == r3.ENGINE_ROLE_AGGREGATED
        assert (server.schema_revision, server.minimum_client_revision) == (info.schema_revision,
                                                                            info.minimum_client_revision)
        for m in (old.openengine.GetModelInfo(r2.GetModelInfoRequest()),
                  old.control.GetModelInfo(r3.GetModelInfoRequest(model=model.model))):
            assert (m.served_model_name, m.max_context_length, m.max_output_tokens) == (
                model.model, model.max_context_tokens, model.max_output_tokens)


def test_same_validation_as_v1():
    with running(profiles=("load",), aliases=BOTH) as (engine, stubs):
        old = Earlier(stubs.channel)
        # A limit v1 enforces is enforced through the alias with the same status.
        too_many = engine.resolved.models[0].config.max_output_tokens + 1
        v1 = code_of(lambda: list(stubs.inference.Generate(generation_pb2.GenerateRequest(
            text="x", sampling=generation_pb2.SamplingParams(max_tokens=too_many)))))
        earlier = code_of(lambda: list(old.openengine.Generate(r2.GenerateRequest(
            prompt="x", sampling=r2.SamplingParams(max_tokens=too_many)))))
        assert v1 == earlier == grpc.StatusCode.INVALID_ARGUMENT
        assert code_of(lambda: old.control.GetModelInfo(r3.GetModelInfoRequest(model="nope"))) == \
            grpc.StatusCode.NOT_FOUND
        # An earlier field the alias cannot carry over is refused, naming it, never dropped.
        with pytest.raises(grpc.RpcError) as err:
            list(old.openengine.Generate(r2.GenerateRequest(prompt="x", media=[r2.MediaItem(url="http://x")])))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "media" in err.value.details() and "Encoder" in err.value.details()


def test_alias_drain_is_guarded_like_admin_drain():
    with running(profiles=("load", "admin"), aliases=("openengine",)) as (engine, stubs):
        old = Earlier(stubs.channel)
        request = r2.DrainRequest(stop_accepting_new_requests=True)
        assert code_of(lambda: list(old.openengine.Drain(request))) == grpc.StatusCode.UNAUTHENTICATED
        assert old.openengine.Health(r2.HealthRequest()).state == r2.HEALTH_STATE_READY
        progress = list(old.openengine.Drain(request, metadata=AUTH))
        assert progress[0].state == r2.DRAIN_STATE_STARTED and progress[-1].state == r2.DRAIN_STATE_COMPLETE
        # Draining through the alias is draining v1: health says so both ways.
        assert stubs.health.Check(health_pb2.HealthCheckRequest(service="openengine.v1.Inference")).status == \
            H.NOT_SERVING
        assert old.openengine.Health(r2.HealthRequest()).state == r2.HEALTH_STATE_DRAINING
        stubs.admin.ResumeGeneration(admin_pb2.ResumeGenerationRequest(), metadata=AUTH)


def test_alias_methods_of_unadvertised_profiles_are_unimplemented():
    with running(profiles=("core",), aliases=BOTH) as (engine, stubs):
        old = Earlier(stubs.channel)
        assert code_of(lambda: old.openengine.GetLoad(r2.GetLoadRequest())) == grpc.StatusCode.UNIMPLEMENTED
        assert code_of(lambda: old.control.GetLoad(r3.GetLoadRequest())) == grpc.StatusCode.UNIMPLEMENTED
        assert code_of(lambda: list(old.openengine.Drain(r2.DrainRequest()))) == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as err:
            list(old.openengine.SubscribeKvEvents(r2.SubscribeKvEventsRequest()))
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "openengine.kv" in err.value.details()


def test_methods_without_translation_name_their_replacement():
    with running(profiles=("load", "runtime-events"), aliases=("openengine",)) as (engine, stubs):
        old = Earlier(stubs.channel)
        with pytest.raises(grpc.RpcError) as err:
            old.openengine.GetKvConnectorInfo(r2.GetKvConnectorInfoRequest())
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "openengine.v1.Discovery/GetCapabilities" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            list(old.openengine.SubscribeRuntimeEvents(r2.SubscribeRuntimeEventsRequest()))
        assert "openengine.v1.Observability/SubscribeRuntimeEvents" in err.value.details()


def test_health_reports_served_aliases_only_and_capabilities_never_list_them():
    with running(profiles=("load",), aliases=("control",)) as (engine, stubs):
        check = lambda s: stubs.health.Check(health_pb2.HealthCheckRequest(service=s)).status  # noqa: E731
        assert check("openengine.v1.Control") == check("openengine.v1.Discovery") == H.SERVING
        assert code_of(lambda: check("openengine.v1.OpenEngine")) == grpc.StatusCode.NOT_FOUND
        assert not {p.name for p in stubs.caps().profiles} & {"openengine.v1.Control", "openengine.v1.OpenEngine"}
        assert code_of(lambda: Earlier(stubs.channel).openengine.Health(r2.HealthRequest())) == \
            grpc.StatusCode.UNIMPLEMENTED


def _reflected(stubs) -> set[str]:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    stub = reflection_pb2_grpc.ServerReflectionStub(stubs.channel)
    responses = list(stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    return {s.name for s in responses[0].list_services_response.service}


def test_reflection_lists_served_aliases_only():
    with running(profiles=("load",), aliases=("openengine",)) as (engine, stubs):
        listed = _reflected(stubs)
        assert "openengine.v1.OpenEngine" in listed and "openengine.v1.Control" not in listed
    with running(profiles=("load",)) as (engine, stubs):
        assert not _reflected(stubs) & {"openengine.v1.OpenEngine", "openengine.v1.Control"}


def test_no_alias_by_default():
    with running(profiles=("load",)) as (engine, stubs):
        old = Earlier(stubs.channel)
        assert code_of(lambda: old.control.Health(r3.HealthRequest())) == grpc.StatusCode.UNIMPLEMENTED
        assert code_of(lambda: stubs.health.Check(health_pb2.HealthCheckRequest(
            service="openengine.v1.OpenEngine"))) == grpc.StatusCode.NOT_FOUND


def test_minimum_client_revision_is_the_earliest_alias_served():
    with running(profiles=("load",)) as (engine, stubs):
        own = stubs.info().schema_revision
        assert stubs.info().minimum_client_revision == own
    assert (alias.ALIASES["openengine"].revision, alias.ALIASES["control"].revision) == (2, 3)
    with running(profiles=("load",), aliases=("control",)) as (engine, stubs):
        assert stubs.info().minimum_client_revision == min(own, 3)
    with running(profiles=("load",), aliases=BOTH) as (engine, stubs):
        assert stubs.info().minimum_client_revision == min(own, 2)


def test_unknown_alias_is_refused_at_start():
    from openengine.engine import ConfigError, EngineConfig, resolve_config
    with pytest.raises(ConfigError) as err:
        resolve_config(EngineConfig(aliases=("opnengine",)))
    assert "unknown alias 'opnengine'" in str(err.value.problems)


# -- fault checks (tests/engine/test_faults.py runs each with and without its fault) ---------------

def _alias_unadvertised_unimplemented(engine, stubs):
    """openengine.kv is not advertised: the alias must refuse as Kv/GetKvEventSources would,
    not with its own "not translated" answer."""
    try:
        Earlier(stubs.channel).openengine.GetKvEventSources(r2.GetKvEventSourcesRequest())
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNIMPLEMENTED and "does not advertise" in (err.details() or "")
    return False


def _alias_abort_shared(engine, stubs):
    call, _ = running_generate(stubs.inference.Generate, generation_pb2.GenerateRequest(
        request_id="fault-abort", text="x", sampling=generation_pb2.SamplingParams(max_tokens=LONG)))
    try:
        Earlier(stubs.channel).openengine.Abort(r2.AbortRequest(request_id="fault-abort"))
        return list(call)[-1].WhichOneof("kind") == "error"
    finally:
        call.cancel()


def _alias_drain_guarded(engine, stubs):
    try:
        list(Earlier(stubs.channel).openengine.Drain(r2.DrainRequest(stop_accepting_new_requests=True)))
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


def _alias_answers_equal(engine, stubs):
    return Earlier(stubs.channel).openengine.GetModelInfo(r2.GetModelInfoRequest()).max_context_length == \
        stubs.model().max_context_tokens


def _alias_in_health(engine, stubs):
    try:
        return stubs.health.Check(health_pb2.HealthCheckRequest(service="openengine.v1.OpenEngine")).status == \
            H.SERVING
    except grpc.RpcError:
        return False


# Each alias fault with the engine settings its check needs (kv is left unadvertised on purpose).
ALIAS_FAULT_CHECKS = {
    "alias-unadvertised-served": (dict(aliases=BOTH), _alias_unadvertised_unimplemented),
    "alias-abort-separate": (dict(aliases=BOTH, token_delay_ms=20), _alias_abort_shared),
    "alias-drain-unguarded": (dict(aliases=BOTH), _alias_drain_guarded),
    "alias-answers-differ": (dict(aliases=BOTH), _alias_answers_equal),
    "alias-not-in-health": (dict(aliases=BOTH), _alias_in_health),
}


def test_schema_revision_continues_the_earlier_numbering_and_is_the_documented_one():
    import re
    from pathlib import Path

    from oespec.registry import load_registry

    root = Path(__file__).resolve().parents[2]
    documented = re.search(r"^\| (\d+) \| this layout", (root / "spec" / "revisions.md").read_text(), re.M)
    assert documented, "spec/revisions.md documents this layout's schema revision"
    declared = load_registry(root / "profiles.yaml").registry.schema_revision
    with running(profiles=("load",)) as (engine, stubs):
        reported = stubs.info().schema_revision
    assert reported > max(a.revision for a in alias.ALIASES.values()) == 3
    assert reported == declared == int(documented.group(1))


def test_control_lora_methods_are_v1_adapters():
    with running(profiles=("adapters",), aliases=("control",)) as (engine, stubs):
        from openengine.v1 import adapters_pb2
        old = Earlier(stubs.channel)
        adapter = r3.LoraAdapter(lora_id=7, lora_name="sql", source_path="/adapters/sql")
        loaded = old.control.LoadLora(r3.LoadLoraRequest(adapter=adapter))
        assert (loaded.adapter, loaded.already_loaded) == (adapter, False)
        # Seen through v1, and loading the same adapter again is revision 3's idempotent success.
        assert [a.name for a in stubs.adapters.ListAdapters(adapters_pb2.ListAdaptersRequest()).adapters] == ["sql"]
        assert old.control.LoadLora(r3.LoadLoraRequest(adapter=adapter)).already_loaded
        assert code_of(lambda: old.control.LoadLora(r3.LoadLoraRequest(adapter=r3.LoraAdapter(
            lora_id=8, lora_name="sql", source_path="/elsewhere")))) == grpc.StatusCode.ALREADY_EXISTS
        assert [(a.lora_name, a.source_path) for a in old.control.ListLoras(r3.ListLorasRequest()).adapters] == \
            [("sql", "/adapters/sql")]
        # The same validation as v1: an empty source is refused with the v1 message.
        with pytest.raises(grpc.RpcError) as err:
            old.control.LoadLora(r3.LoadLoraRequest(adapter=r3.LoraAdapter(lora_name="x")))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "source" in err.value.details()
        assert old.control.UnloadLora(r3.UnloadLoraRequest(lora_name="sql")).adapter.source_path == "/adapters/sql"
        assert not stubs.adapters.ListAdapters(adapters_pb2.ListAdaptersRequest()).adapters
        assert code_of(lambda: old.control.UnloadLora(r3.UnloadLoraRequest(lora_name="sql"))) == \
            grpc.StatusCode.NOT_FOUND


def _until(predicate, timeout=5.0):
    import time
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("which", ["openengine", "control"])
def test_kv_events_stream_through_either_alias(which):
    with running(role="prefill", profiles=("kv", "admin"), aliases=(which,)) as (engine, stubs):
        old = Earlier(stubs.channel)
        pb = r2 if which == "openengine" else r3
        stub = old.openengine if which == "openengine" else old.control
        sources = stub.GetKvEventSources(pb.GetKvEventSourcesRequest()).sources
        host, port = engine.address.rsplit(":", 1)
        assert (sources[0].transport, sources[0].endpoint_addr.host, sources[0].endpoint_addr.port) == \
            ("grpc", host, int(port))
        sub = stub.SubscribeKvEvents(pb.SubscribeKvEventsRequest(), timeout=20)
        assert _until(lambda: engine.call(lambda: len(engine.backend.kv_events.subscribers)) == 1)
        list(stubs.inference.Generate(generation_pb2.GenerateRequest(text="x" * 40)))
        first = next(sub)
        batch = first if which == "openengine" else first.batch
        assert batch.sequence_number == 1
        stored = batch.events[0].block_stored
        assert stored.block_hashes and stored.block_hashes[0].encoding == "bytes" and stored.token_ids
        sub.cancel()
        # Earlier options v1 cannot honour are refused, naming them.
        with pytest.raises(grpc.RpcError) as err:
            next(stub.SubscribeKvEvents(pb.SubscribeKvEventsRequest(include_snapshot=True)))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "include_snapshot" in err.value.details()


def test_alias_from_the_command_line_and_the_configuration_file(tmp_path):
    import argparse

    from oespec.commands.engine import add_arguments, build_config
    from openengine.engine import config_from_mapping

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert build_config(parser.parse_args(["--alias", "openengine, control"])).aliases == ("openengine", "control")
    assert build_config(parser.parse_args([])).aliases == ()
    assert config_from_mapping({"alias": ["control"]}).aliases == ("control",)
    assert config_from_mapping({"alias": "openengine"}).aliases == ("openengine",)


@pytest.mark.slow
def test_unknown_alias_on_the_command_line_is_refused_without_a_traceback():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "oespec.cli", "engine", "--port", "0", "--alias", "contrl"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown alias 'contrl'" in out.stderr and "openengine.v1.Control" in out.stderr
    assert "Traceback" not in out.stderr


def test_alias_drain_is_not_answered_on_the_main_address_when_admin_has_its_own():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        admin_port = s.getsockname()[1]
    with running(profiles=("admin",), aliases=("openengine",), admin={"port": admin_port}) as (engine, stubs):
        with pytest.raises(grpc.RpcError) as err:
            list(Earlier(stubs.channel).openengine.Drain(r2.DrainRequest(stop_accepting_new_requests=True),
                                                         metadata=AUTH))
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED and "admin address" in err.value.details()
        assert Earlier(stubs.channel).openengine.Health(r2.HealthRequest()).state == r2.HEALTH_STATE_READY


def test_role_is_translated_by_name():
    with running(role="prefill", profiles=("kv",), aliases=BOTH) as (engine, stubs):
        old = Earlier(stubs.channel)
        assert old.openengine.GetEngineInfo(r2.GetEngineInfoRequest()).role == r2.ENGINE_ROLE_PREFILL
        assert old.control.GetServerInfo(r3.GetServerInfoRequest()).engine_role == r3.ENGINE_ROLE_PREFILL


def _refused_rows():
    """(alias, method, path to the field, field) for every table row whose v1 column says
    'refused': the rows of spec/services.md the engine must refuse with INVALID_ARGUMENT."""
    from tests.spec.test_alias_tables import FIELD_HEADING, SECTIONS, _ticked

    refused = {}
    for heading, rows in SECTIONS.items():
        m = FIELD_HEADING.match(heading)
        if m and m.group(2) == "→":
            for cells in rows:
                if cells[2].startswith("refused"):
                    refused.setdefault(m.group(1), []).append(_ticked(cells[0])[0])
    out = []
    for service in alias.ALIASES.values():
        for method in service.descriptor.methods:
            if not service.methods[method.name].translated:
                continue
            stack = [(method.input_type, ())]
            while stack:
                message, path = stack.pop()
                for name in refused.get(message.full_name, ()):
                    out.append((service, method, path, message.fields_by_name[name]))
                for f in message.fields:
                    if f.message_type is not None and len(path) < 2 and not f.message_type.GetOptions().map_entry:
                        stack.append((f.message_type, path + (f,)))
    return out


def _set_field(message, field) -> None:
    """Give `field` a value that is not its default (a sub-message gets its first field set)."""
    FD = field.__class__
    if field.message_type is not None:
        target = getattr(message, field.name).add() if field.is_repeated else getattr(message, field.name)
        target.SetInParent()
        first = field.message_type.fields[0]
        if first.cpp_type == FD.CPPTYPE_MESSAGE:
            getattr(target, first.name).SetInParent()
        else:
            _set_field(target, first)
    elif field.cpp_type == FD.CPPTYPE_BOOL:
        setattr(message, field.name, True)
    elif field.cpp_type == FD.CPPTYPE_STRING:
        setattr(message, field.name, "x")
    else:  # numbers and enums
        setattr(message, field.name, 1)


def test_every_field_the_translation_table_refuses_is_refused_naming_it():
    from google.protobuf import message_factory

    rows = _refused_rows()
    assert len(rows) >= 8
    with running(role="prefill", profiles=("kv", "load", "admin"), aliases=BOTH) as (engine, stubs):
        for service, method, path, field in rows:
            request = message_factory.GetMessageClass(method.input_type)()
            holder = request
            for step in path:
                holder = getattr(holder, step.name)
            _set_field(holder, field)
            if method.name == "Drain":
                request.stop_accepting_new_requests = True
            call = (stubs.channel.unary_stream if method.server_streaming else stubs.channel.unary_unary)(
                f"/{service.service}/{method.name}", request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=lambda b: b)
            with pytest.raises(grpc.RpcError) as err:
                result = call(request, metadata=AUTH, timeout=10)
                if method.server_streaming:
                    next(result)
            where = f"{service.service}/{method.name} {'.'.join(s.name for s in path + (field,))}"
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, where
            assert field.name in err.value.details(), where
