"""What a benchmark process can measure about itself: CPU time, resident memory and the bytes its
TCP connections carried. Every reading is taken by the process being measured, so a window's
start and end are marked exactly where the work starts and stops."""

from __future__ import annotations

import os
import resource
import socket
import struct
import time
from dataclasses import dataclass

# struct tcp_info (linux/tcp.h): u64 tcpi_bytes_acked at 120, u64 tcpi_bytes_received at 128,
# u32 tcpi_segs_out at 136, u32 tcpi_segs_in at 140 (present since Linux 4.2).
_TCP_INFO_LEN = 144
_TCP_COUNTERS = struct.Struct("=QQII")
_TCP_COUNTERS_AT = 120


def usage() -> dict:
    """This process now: CLOCK_MONOTONIC ns, CPU seconds (user + system time of every thread, those
    that ended included, at getrusage's microsecond resolution) and resident memory in KiB."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"mono_ns": time.monotonic_ns(), "cpu_s": ru.ru_utime + ru.ru_stime, "rss_kib": rss_kib()}


def rss_kib(pid: int | str = "self") -> int:
    """VmRSS from /proc/<pid>/status, in KiB (0 when unavailable)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass(frozen=True)
class TcpBytes:
    """Totals over a set of TCP connections, as the kernel counts them for this end."""

    sent: int = 0        # payload bytes sent and acknowledged
    received: int = 0    # payload bytes received
    segments: int = 0    # segments both ways, pure ACKs included

    def __sub__(self, other: "TcpBytes") -> "TcpBytes":
        return TcpBytes(self.sent - other.sent, self.received - other.received, self.segments - other.segments)

    @property
    def payload(self) -> int:
        return self.sent + self.received

    def on_wire(self, header_bytes: int) -> int:
        """Payload plus one IP + TCP header per segment (loopback has no link-layer header)."""
        return self.payload + self.segments * header_bytes


def tcp_header_bytes() -> int:
    """IPv4 (20) + TCP (20) + the timestamp option (12) when the kernel uses timestamps."""
    with open("/proc/sys/net/ipv4/tcp_timestamps", encoding="ascii") as fh:
        return 40 if fh.read().strip() == "0" else 52


def tcp_bytes(peer_ports: set[int]) -> TcpBytes:
    """Sum the kernel's counters over this process's TCP sockets whose peer port is in the given
    set: exactly the connections of the benchmark, whatever else the machine's loopback carries."""
    sent = received = segments = 0
    fd_dir = "/proc/self/fd"
    for name in os.listdir(fd_dir):
        try:
            if not os.readlink(f"{fd_dir}/{name}").startswith("socket:"):
                continue
            dup = os.dup(int(name))
        except OSError:
            continue
        try:
            sock = socket.socket(fileno=dup)  # family and type from the descriptor
        except OSError:
            os.close(dup)
            continue
        try:
            if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                if sock.getpeername()[1] not in peer_ports:
                    continue
            except OSError:
                continue  # listening or not connected
            raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
            if len(raw) < _TCP_COUNTERS_AT + _TCP_COUNTERS.size:
                continue
            acked, got, segs_out, segs_in = _TCP_COUNTERS.unpack_from(raw, _TCP_COUNTERS_AT)
            sent += acked
            received += got
            segments += segs_out + segs_in
        finally:
            sock.close()  # closes the duplicate only
    return TcpBytes(sent, received, segments)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg writes them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
