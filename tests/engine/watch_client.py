"""A WatchLoad client run as its own process by the soak test: it opens N streams, reads their
settings, says `ready`, keeps reading, and then leaves as MODE says: `cancel` cancels every stream
(RST_STREAM), `exit` leaves without closing anything (the kernel closes the sockets with unread
data: TCP resets), `hang` keeps reading until it is killed with SIGKILL."""

from __future__ import annotations

import asyncio
import os
import sys

import grpc

from openengine.v1 import load_pb2, observability_service_pb2_grpc


async def main(address: str, count: int, mode: str, channels: int = 4) -> None:
    # A small receive window: the streams that do not read soon have writes pending on the engine,
    # which is where a client that vanishes hurts.
    options = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
    pool = [grpc.aio.insecure_channel(address, options=options) for _ in range(channels)]
    stubs = [observability_service_pb2_grpc.ObservabilityStub(c) for c in pool]
    calls = [stubs[i % channels].WatchLoad(load_pb2.WatchLoadRequest(interval_ms=int(os.environ.get("WATCH_CLIENT_INTERVAL_MS", "100")), heartbeat_ms=0, per_rank=True))
             for i in range(count)]
    for call in calls:
        await call.read()   # settings: the stream is open on the engine
    print("ready", flush=True)

    async def drain(call):
        try:
            while await call.read() is not grpc.aio.EOF:
                pass
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    readers = [asyncio.ensure_future(drain(c)) for c in calls[::10]]   # a tenth read, the rest do not
    await asyncio.sleep(float(os.environ.get("WATCH_CLIENT_LINGER", "0.3")))
    if mode == "cancel":
        for call in calls:
            call.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for c in pool:
            await c.close(grace=None)
        print("done", flush=True)
        return
    if mode == "exit":
        os._exit(0)
    while True:   # hang: until SIGKILL
        await asyncio.sleep(1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
