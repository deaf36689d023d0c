"""A tiny engine of upstream OpenEngine v1, written from the stubs generated from the pinned image,
for testing the upstream client (tests/interop/upstream_client.py) without any server of the
repository. It counts: token n has id n and text " w<n>" (with a seed and a temperature above zero
the ids come from the seed instead). `--defect NAME` plants one fault a client must catch.

Started like the client (`python -I -S upstream_servicer.py --stubs DIR --site-packages SITE`); it
prints `serving on HOST:PORT` and serves until stdin closes."""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
import uuid

parser = argparse.ArgumentParser()
parser.add_argument("--stubs", required=True)
parser.add_argument("--site-packages", action="append", default=[])
parser.add_argument("--defect", default="")
ARGS = parser.parse_args()
sys.path[:0] = [os.path.realpath(ARGS.stubs)]
sys.path.extend(ARGS.site_packages)

from concurrent import futures  # noqa: E402

import grpc  # noqa: E402

from openengine.v1 import (  # noqa: E402
    generation_pb2, lifecycle_pb2, lora_pb2, model_pb2, openengine_pb2_grpc, server_pb2,
)

MODEL = "counting-model"
MAX_OUTPUT = 512
DEFECT = ARGS.defect
TOKEN_DELAY_S = 0.005      # slow enough for the client to abort a running request


class Control(openengine_pb2_grpc.ControlServicer):
    def __init__(self, running: dict, finished: set):
        self.running, self.finished = running, finished

    def GetServerInfo(self, request, context):
        return server_pb2.ServerInfo(
            engine_name="counting", engine_version="0", engine_role=server_pb2.ENGINE_ROLE_AGGREGATED,
            instance_id="counting-1", supported_models=[MODEL], schema_revision=1,
            minimum_client_revision=2 if DEFECT == "revision" else 1, schema_release="counting-test-1")

    def GetModelInfo(self, request, context):
        if request.model not in (MODEL, "") and DEFECT != "unknown-model":
            context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model!r}")
        info = model_pb2.ModelInfo(model_id=MODEL, served_model_name=MODEL, max_output_tokens=MAX_OUTPUT,
                                   supports_text_input=True, supports_token_ids_input=True)
        info.generation.max_num_sequences = 2
        info.generation.output_logprobs.supported = True
        return info

    def GetLoad(self, request, context):
        return server_pb2.LoadInfo(instance_id="counting-1", running_requests=len(self.running))

    def Health(self, request, context):
        return lifecycle_pb2.HealthResponse(state=lifecycle_pb2.HEALTH_STATE_READY)

    def Abort(self, request, context):
        target = request.WhichOneof("target")
        if target is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "give exactly one abort target")
        if target != "request_id":
            context.abort(grpc.StatusCode.UNIMPLEMENTED, f"abort by {target} is not supported")
        event = self.running.get(request.request_id)
        if event is None:
            if request.request_id in self.finished:
                return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ALREADY_FINISHED)
            context.abort(grpc.StatusCode.NOT_FOUND, f"no request {request.request_id!r}")
        if DEFECT != "abort":
            event.set()
        return lifecycle_pb2.AbortResponse(status=lifecycle_pb2.ABORT_STATUS_ABORTED)

    def LoadLora(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "LoRA is not enabled")

    def UnloadLora(self, request, context):
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, "LoRA is not enabled")

    def ListLoras(self, request, context):
        return lora_pb2.ListLorasResponse()


class Inference(openengine_pb2_grpc.InferenceServicer):
    def __init__(self, running: dict, finished: set):
        self.running, self.finished = running, finished

    def Generate(self, request, context):
        rid = request.request_id
        if request.model not in (MODEL, ""):
            context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model!r}")
        limit = request.stopping.max_tokens if request.stopping.HasField("max_tokens") else 16
        limit = limit + 2 if DEFECT == "max-tokens" else limit
        texts = [c.stop_text for c in request.stopping.conditions if c.WhichOneof("condition") == "stop_text"]
        ids = {c.stop_token_id for c in request.stopping.conditions if c.WhichOneof("condition") == "stop_token_id"}
        texts = [] if DEFECT == "stop" else texts
        ids = set() if DEFECT == "stop-token" else ids
        outputs = request.sampling.num_sequences if request.sampling.HasField("num_sequences") else 1
        outputs = 1 if DEFECT == "num-sequences" else outputs
        seeded = request.sampling.HasField("seed") and DEFECT != "seed"
        random_ids = request.sampling.HasField("temperature") and request.sampling.temperature > 0
        aborted = self.running.setdefault(rid, threading.Event())
        echoed = "" if DEFECT == "request-id" else rid
        prompt_tokens = len(request.prompt.split()) or len(request.token_ids.ids)
        completion = 0
        try:
            # The outputs one after the other: each ends with its own finished event.
            for index in range(outputs):
                rng = random.Random((request.sampling.seed + index) if seeded else uuid.uuid4().int)
                text, count, reason, match = "", 0, generation_pb2.FINISH_REASON_LENGTH, None
                while count < limit:
                    if aborted.is_set():
                        reason = generation_pb2.FINISH_REASON_CANCELLED
                        break
                    token = rng.randrange(1, 30000) if random_ids else count + 1
                    piece = f" w{token}"
                    count += 1
                    hit = next((t for t in texts if t in text + piece), None)
                    if hit is not None or token in ids:
                        reason = generation_pb2.FINISH_REASON_STOP
                        match = generation_pb2.StopMatch(stop_text=hit) if hit is not None else \
                            generation_pb2.StopMatch(stop_token_id=token)
                        break
                    text += piece
                    response = generation_pb2.GenerateResponse(request_id=echoed)
                    response.token.output_index = index
                    info = response.token.tokens.add(token_id=token, token=piece)
                    if request.response.return_output_logprobs:
                        info.logprob = -0.5
                    response.token.text = piece
                    if DEFECT == "usage-early":
                        response.usage.prompt_tokens = prompt_tokens
                    yield response
                    time.sleep(TOKEN_DELAY_S)
                completion += count
                last = generation_pb2.GenerateResponse(request_id=rid)
                last.finished.output_index = index
                last.finished.reason = reason
                if match is not None:
                    last.finished.stop_match.CopyFrom(match)
                if index == outputs - 1:
                    last.usage.prompt_tokens = prompt_tokens
                    last.usage.completion_tokens = completion
                    last.usage.total_tokens = prompt_tokens + completion
                yield last
        finally:
            self.running.pop(rid, None)
            self.finished.add(rid)


def _garbage(request, context):
    return b"\x0a\xff\xff\xff"          # a length-delimited field 1 that runs past the end


class _Handlers:
    """Stands in for the server while the generated code registers Control's methods, so one
    method's handler can be swapped before they reach the real server."""

    def add_generic_rpc_handlers(self, handlers):
        pass

    def add_registered_method_handlers(self, service, methods):
        self.service, self.methods = service, dict(methods)


def main() -> None:
    running: dict = {}
    finished: set = set()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    handlers = _Handlers()
    openengine_pb2_grpc.add_ControlServicer_to_server(Control(running, finished), handlers)
    if DEFECT == "garbage":
        handlers.methods["ListLoras"] = grpc.unary_unary_rpc_method_handler(
            _garbage, request_deserializer=lora_pb2.ListLorasRequest.FromString, response_serializer=lambda b: b)
    server.add_registered_method_handlers(handlers.service, handlers.methods)
    openengine_pb2_grpc.add_InferenceServicer_to_server(Inference(running, finished), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(f"serving on 127.0.0.1:{port}", flush=True)
    sys.stdin.read()                    # until the parent closes stdin
    server.stop(0)


if __name__ == "__main__":
    main()
