"""What an engine sends beyond upstream's messages, as a client of upstream OpenEngine v1 decodes it.

Each answer of Control's GetServerInfo, GetModelInfo, GetLoad and Health, and every response of a
Generate stream, is decoded with stubs generated from upstream/openengine-v1.binpb alone; every
field those stubs do not know, at any depth, is printed with its message and number. The proposal
adds to upstream's messages only from number 100 up, so upstream's own growth never meets it: a
field below 100 that upstream does not define is one a later upstream revision may give another
meaning, and fails.

Run it as tests/interop/upstream_client.py is run (tests/interop/stubs.py builds the command line):

    python -I -S tests/interop/upstream_unknown_fields.py --stubs DIR --site-packages SITE --target HOST:PORT

One line per unknown field (`FIELD message number`), then a verdict; exit status 1 when a field
below 100 came, 2 when the arguments are wrong or an RPC failed.
"""

from __future__ import annotations

import argparse
import os
import sys


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="list the fields an engine sends that upstream v1 does not define")
    parser.add_argument("--target", required=True, help="the engine's address, HOST:PORT")
    parser.add_argument("--stubs", required=True, help="the folder holding the generated openengine/v1 stubs")
    parser.add_argument("--site-packages", action="append", default=[],
                        help="a folder holding grpc and protobuf (repeatable)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds allowed for each call (default: 30)")
    return parser.parse_args(argv)


ARGS = _arguments(sys.argv[1:])
STUBS = os.path.realpath(ARGS.stubs)
# Upstream's stubs first; grpc and protobuf after them. Nothing else: no site, no PYTHONPATH.
sys.path[:0] = [STUBS]
sys.path.extend(ARGS.site_packages)

import grpc  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402
from google.protobuf.unknown_fields import UnknownFieldSet  # noqa: E402

import openengine  # noqa: E402
from openengine.v1 import generation_pb2, lifecycle_pb2, model_pb2, openengine_pb2_grpc, server_pb2  # noqa: E402

FIRST_ADDITION = 100     # the proposal's additions to upstream's messages take numbers from here


def unknown_fields(message, seen: set[tuple[str, int]]) -> None:
    """Adds (message name, field number) for every field of `message`, and of the messages
    within it, that upstream's stubs do not define."""
    for field in UnknownFieldSet(message):
        seen.add((message.DESCRIPTOR.full_name, field.field_number))
    for descriptor, value in message.ListFields():
        if descriptor.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if descriptor.message_type.GetOptions().map_entry:
            values = value.values() if descriptor.message_type.fields_by_name["value"].message_type else ()
        elif descriptor.is_repeated:
            values = value
        else:
            values = (value,)
        for inner in values:
            unknown_fields(inner, seen)


def answers(channel: grpc.Channel, timeout: float) -> list:
    """Every answer an upstream client gets on its ordinary path: server, model, load, health
    and one short Generate stream."""
    control = openengine_pb2_grpc.ControlStub(channel)
    inference = openengine_pb2_grpc.InferenceStub(channel)
    info = control.GetServerInfo(server_pb2.GetServerInfoRequest(), timeout=timeout)
    models = [control.GetModelInfo(model_pb2.GetModelInfoRequest(model=name), timeout=timeout)
              for name in info.supported_models]
    load = control.GetLoad(server_pb2.GetLoadRequest(include_per_rank=True), timeout=timeout)
    health = control.Health(lifecycle_pb2.HealthRequest(), timeout=timeout)
    model = models[0]
    request = generation_pb2.GenerateRequest(request_id=f"upstream-unknown-fields-{os.getpid()}",
                                             model=info.supported_models[0])
    if model.HasField("supports_text_input") and not model.supports_text_input:
        request.token_ids.ids.extend([1, 2, 3, 4])
    else:
        request.prompt = "Count with me: one, two, three,"
    request.stopping.max_tokens = 4
    if model.generation.output_logprobs.supported:
        request.response.return_output_logprobs = True
    return [info, *models, load, health, *inference.Generate(request, timeout=timeout)]


def main() -> int:
    here = os.path.realpath(openengine.__file__)
    if not here.startswith(STUBS + os.sep):
        print(f"FAIL setup: openengine is imported from {here}, not from the upstream stubs in {STUBS}")
        return 2
    with grpc.insecure_channel(ARGS.target) as channel:
        try:
            got = answers(channel, ARGS.timeout)
        except grpc.RpcError as err:
            print(f"FAIL an RPC failed: {err.code().name} ({err.details()})")
            return 2
    seen: set[tuple[str, int]] = set()
    for message in got:
        unknown_fields(message, seen)
    for name, number in sorted(seen):
        print(f"FIELD {name} {number}")
    low = sorted(f"{name} {number}" for name, number in seen if number < FIRST_ADDITION)
    if low:
        print(f"FAIL fields upstream does not define, below {FIRST_ADDITION}: {', '.join(low)}")
        return 1
    print(f"every field upstream does not define is numbered from {FIRST_ADDITION} up")
    return 0


if __name__ == "__main__":
    sys.exit(main())
