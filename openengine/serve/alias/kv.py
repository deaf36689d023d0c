"""KV event sources and streams for both aliases: revisions 2 and 3 spell the KV messages alike
(revision 3 wraps each batch in a response with a terminal error case), so one translation serves
both, given the revision's message module."""

from __future__ import annotations

from openengine.serve.alias._common import not_translated
from openengine.v1 import kv_pb2

# v1 KvMedium -> the earlier StorageMedium value name.
_MEDIUM = {kv_pb2.KV_MEDIUM_GPU: "STORAGE_MEDIUM_GPU", kv_pb2.KV_MEDIUM_CPU: "STORAGE_MEDIUM_CPU_PINNED",
           kv_pb2.KV_MEDIUM_DISK: "STORAGE_MEDIUM_DISK", kv_pb2.KV_MEDIUM_REMOTE: "STORAGE_MEDIUM_EXTERNAL"}


def _endpoint(pb, address: str, protocol: str):
    """`host:port` (or `[v6]:port`) -> an earlier KvEndpoint."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return pb.KvEndpoint(host=address, protocol=protocol)
    return pb.KvEndpoint(host=host.strip("[]"), port=int(port), protocol=protocol)


def event_sources(pb, request, answer: kv_pb2.GetKvEventSourcesResponse):
    wanted = set(request.data_parallel_ranks)
    out = pb.GetKvEventSourcesResponse()
    for source in answer.sources:
        if wanted and source.HasField("data_parallel_rank") and source.data_parallel_rank not in wanted:
            continue
        item = out.sources.add(transport=source.publisher, topic=source.topic,
                               replay_endpoint=source.replay_endpoint, encoding="protobuf")
        item.endpoint_addr.CopyFrom(_endpoint(pb, source.endpoint, source.publisher))
        if source.HasField("data_parallel_rank"):
            item.data_parallel_rank = source.data_parallel_rank
    return out


def subscribe_request(request) -> kv_pb2.SubscribeKvEventsRequest:
    out = kv_pb2.SubscribeKvEventsRequest()
    if len(request.data_parallel_ranks) > 1:
        raise not_translated("data_parallel_ranks", "a v1 stream follows one rank or all of them; open one "
                                                    "Kv/SubscribeKvEvents per rank")
    if request.data_parallel_ranks:
        out.data_parallel_rank = request.data_parallel_ranks[0]
    if request.include_snapshot:
        raise not_translated("include_snapshot", "v1 streams carry no snapshot; replay with "
                                                 "Kv/SubscribeKvEvents from_sequence instead")
    if request.start_sequence_number:
        out.from_sequence = request.start_sequence_number
    return out


def event_batch(pb, batch: kv_pb2.SubscribeKvEventsResponse):
    out = pb.KvEventBatch(sequence_number=batch.sequence, timestamp_unix_nanos=batch.timestamp.ToNanoseconds(),
                          data_parallel_rank=batch.data_parallel_rank)
    for event in batch.events:
        kind = event.WhichOneof("kind")
        item = out.events.add()
        if kind == "stored":
            s = event.stored
            item.block_stored.CopyFrom(pb.BlockStored(
                block_hashes=[pb.KvBlockHash(value=h, encoding="bytes") for h in s.block_hashes],
                token_ids=s.token_ids, block_size=s.block_size, lora_name=s.adapter,
                medium=pb.StorageMedium.Value(_MEDIUM.get(s.medium, "STORAGE_MEDIUM_UNSPECIFIED"))))
            if s.HasField("parent_block_hash"):
                item.block_stored.parent_block_hash.CopyFrom(pb.KvBlockHash(value=s.parent_block_hash,
                                                                           encoding="bytes"))
        elif kind == "removed":
            r = event.removed
            item.block_removed.CopyFrom(pb.BlockRemoved(
                block_hashes=[pb.KvBlockHash(value=h, encoding="bytes") for h in r.block_hashes],
                medium=pb.StorageMedium.Value(_MEDIUM.get(r.medium, "STORAGE_MEDIUM_UNSPECIFIED"))))
        elif kind == "cleared":
            item.all_blocks_cleared.SetInParent()
    return out


DROPPED = ("{n} KV event batches were dropped before this one (the subscriber fell behind); "
           "the earlier layout cannot mark a gap, so the stream ends: subscribe again")
