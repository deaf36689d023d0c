"""Admin on the SDK: a backend that implements `AdminOperations` gets `openengine.admin` served,
guarded, with the run state, health and capability revision kept by the SDK; the conformance
suite's admin and health cases pass against it."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from openengine.conformance import Options, Outcome, run_suite
from openengine.serve import AdminAccess, Chunk, Final, FinishReason, Load, RunningServer, SequenceStops, ServeConfig
from openengine.v1 import admin_pb2, admin_service_pb2_grpc as admin_grpc

from tests.serve.test_server import Backend

TOKEN = "sdk-admin-token"
pytestmark = pytest.mark.waits


class AdminBackend(Backend):
    """Runs `SLOTS` requests at once and queues the rest, streams until told to stop, honours
    max_tokens and stop conditions, and records what Admin asked of it."""

    SLOTS = 4

    def __init__(self, **kw):
        super().__init__(limits={"core": {"max_running_requests": self.SLOTS},
                                 "admin": {"pause_modes": ["abort", "wait", "keep"], "max_sleep_level": 2,
                                           "updatable_limits": ["openengine.load.max_watchers"]}}, **kw)
        self.calls: list[tuple] = []
        self.paused = False
        self.queued = 0
        self.slots = asyncio.Semaphore(self.SLOTS)

    async def generate(self, request):
        count = request.stopping.max_tokens if request.stopping.HasField("max_tokens") else 16
        stops = SequenceStops(request.stopping)
        self.queued += 1
        waiting = True
        try:
            async with self.slots:
                self.queued, waiting = self.queued - 1, False
                self.running[request.request_id] = True
                self.engine.load_changed()
                try:
                    for i in range(1, count + 1):
                        await asyncio.sleep(0.003)
                        while self.paused and self.running[request.request_id]:
                            await asyncio.sleep(0.005)
                        if not self.running[request.request_id]:
                            return
                        token = 65 + i % 3
                        _, stop = stops.add(token)
                        if stop is not None or i == count:
                            reason = FinishReason.LENGTH if stop is None else FinishReason.STOP
                            yield Final(reason, prompt_tokens=1, completion_tokens=i, token_ids=(token,),
                                        stop_match=stop)
                            return
                        yield Chunk((token,))
                finally:
                    del self.running[request.request_id]
        finally:
            if waiting:
                self.queued -= 1   # cancelled or aborted while queued

    def load(self):
        return Load(running_requests=len(self.running), queued_requests=self.queued)

    async def pause(self, mode):
        self.calls.append(("pause", mode))
        self.paused = mode == "keep"

    async def resume(self):
        self.calls.append(("resume",))
        self.paused = False

    async def sleep(self, level, tags):
        self.calls.append(("sleep", level, tags))
        return level << 20

    async def wake(self, tags):
        self.calls.append(("wake", tags))

    async def reset_prefix_cache(self):
        return None if self.running else 7

    def update_limits(self, limits):
        self.calls.append(("update", limits["openengine.load"]["max_watchers"]))


def test_admin_is_guarded_and_drives_the_backend_and_the_revision():
    backend = AdminBackend()
    with RunningServer(lambda: backend, ServeConfig(port=0, admin=AdminAccess(token=TOKEN))) as engine:
        assert "openengine.admin" in engine.server.state.selection.limits
        with grpc.insecure_channel(engine.address) as channel:
            stub = admin_grpc.AdminStub(channel)
            with pytest.raises(grpc.RpcError) as err:
                stub.ResetPrefixCache(admin_pb2.ResetPrefixCacheRequest())
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            auth = (("authorization", f"Bearer {TOKEN}"),)
            assert stub.ResetPrefixCache(admin_pb2.ResetPrefixCacheRequest(), metadata=auth).freed_blocks == 7
            assert stub.Sleep(admin_pb2.SleepRequest(level=2), metadata=auth).released_bytes == 2 << 20
            assert stub.WakeUp(admin_pb2.WakeUpRequest(), metadata=auth).awake
            update = admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
                limit="openengine.load.max_watchers", uint_value=9)])
            answer = stub.UpdateConfig(update, metadata=auth)
            assert (answer.previous_revision, answer.revision) == (1, 2)
            with pytest.raises(grpc.RpcError) as err:
                stub.UpdateConfig(admin_pb2.UpdateConfigRequest(updates=[admin_pb2.LimitUpdate(
                    limit="openengine.core.max_sequences", uint_value=2)]), metadata=auth)
            assert "not in openengine.admin.updatable_limits" in err.value.details()
    assert backend.calls == [("sleep", 2, frozenset()), ("wake", frozenset()), ("update", 9)]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_admin_and_health_cases_pass_against_an_sdk_engine():
    with RunningServer(AdminBackend, ServeConfig(port=0, admin=AdminAccess(token=TOKEN))) as engine:
        report = asyncio.run(run_suite(Options(target=engine.address, admin_token=TOKEN),
                                       patterns=["admin.*", "health.*", "revision.*", "core.*"]))
    bad = {r.id: r.reason for r in report.results if r.outcome.bad}
    assert bad == {}, bad
    ran = {r.id for r in report.results if r.outcome is Outcome.PASS}
    assert any(i.startswith("admin.") for i in ran) and "health.pause.work-not-serving" in ran
