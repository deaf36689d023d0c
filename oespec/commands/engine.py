"""oespec engine: run the reference engine (or, with --backend llama, a GGUF model)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import sys

HELP = "run the reference engine, a gRPC server that serves the contract with a stand-in model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None,
                        help="port to listen on; 0 picks a free one, logged at start (default: 50051)")
    parser.add_argument("--profiles", default=None,
                        help="comma-separated profiles to advertise, short (load, kv, runtime-events) or full "
                             "names, or 'all' for every profile the role allows that can be served together "
                             "(default: all; profiles left out are logged with the reason); core is always on")
    parser.add_argument("--role", choices=["aggregated", "prefill", "decode", "encoder"], default=None,
                        help="the engine's role (default: aggregated)")
    parser.add_argument("--config", metavar="FILE", help="YAML or JSON configuration (limits, model or models, admin, ...); "
                        "command-line flags override it")
    parser.add_argument("--limit", action="append", default=[], metavar="PROFILE.LIMIT=VALUE",
                        help="set one limit, e.g. core.max_sequences=2 (repeatable; lists as a,b)")
    parser.add_argument("--token-delay-ms", type=float, default=None,
                        help="time per generated token, so requests really run (default: 5)")
    parser.add_argument("--instance-id", default=None, help="instance id (default: a fresh random one)")
    parser.add_argument("--admin-port", type=int, default=None,
                        help="serve Admin on its own port (0 picks one) instead of the main address")
    parser.add_argument("--admin-host", default=None, help="address for --admin-port (default: --host)")
    parser.add_argument("--admin-token", default=None,
                        help="bearer token Admin requires (default: generated and logged, unless mTLS is on)")
    parser.add_argument("--admin-tls-cert", default=None, help="server certificate (PEM) for the admin address")
    parser.add_argument("--admin-tls-key", default=None, help="server private key (PEM) for the admin address")
    parser.add_argument("--admin-client-ca", default=None,
                        help="CA (PEM) that admin client certificates must be signed by (mutual TLS)")
    parser.add_argument("--check-config", action="store_true",
                        help="check the configuration, print what would be served, and exit")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--backend", choices=["reference", "llama"], default="reference",
                        help="reference: the stand-in model; llama: the GGUF model --model names, run by "
                             "llama.cpp (`make llama` installs it; --limit core.max_running_requests=N, "
                             "core.max_batch_tokens=N, core.max_logprobs=N)")
    parser.add_argument("--model", metavar="FILE", help="the GGUF file --backend llama serves")
    parser.add_argument("--threads", type=int, default=None,
                        help="llama.cpp threads per step for --backend llama (default: 1)")
    connections = parser.add_argument_group(
        "connections", "how long a connection is kept, in seconds, and how many calls may wait for the "
        "event loop (openengine.serve.ConnectionPolicy)")
    for name, text in CONNECTION_FLAGS.items():
        counted = name == "max_pending_calls"
        connections.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int if counted else float,
                                 default=None, metavar="N" if counted else "S",
                                 help=f"{text} (default: {_policy_default(name)})")


# ConnectionPolicy field -> what its flag sets.
CONNECTION_FLAGS = {
    "handshake_timeout_s": "close a connection that has not sent its HTTP/2 settings by then",
    "idle_timeout_s": "close (GOAWAY) a connection with no call open for this long; 0: never",
    "keepalive_time_s": "ping a connection that was quiet this long",
    "keepalive_timeout_s": "close a connection whose ping is not answered within this",
    "min_client_ping_interval_s": "shortest keepalive interval a client may use",
    "unrequested_call_timeout_s": "cancel a call the server could not start within this",
    "max_pending_calls": "calls received but not yet started beyond which gRPC cancels arriving ones",
}


def _policy_default(name: str) -> str:
    from openengine.serve import ConnectionPolicy

    value = getattr(ConnectionPolicy(), name)
    return "never" if value is None else f"{value:g}"


def connection_policy(args: argparse.Namespace, base=None):
    """The connection flags over `base` (default: ConnectionPolicy's defaults)."""
    from openengine.serve import ConnectionPolicy

    given = {name: getattr(args, name) for name in CONNECTION_FLAGS if getattr(args, name, None) is not None}
    if given.get("idle_timeout_s") == 0:
        given["idle_timeout_s"] = None
    return dataclasses.replace(base or ConnectionPolicy(), **given)


def run(args: argparse.Namespace) -> int:
    if args.backend == "llama":
        from openengine.llama.command import run as run_llama
        args.connections = connection_policy(args)
        return run_llama(args)
    from openengine.engine import ConfigError, check
    from openengine.serve import CannotServe

    try:
        config = check(build_config(args))
    except ConfigError as err:
        return _unservable(err)
    if args.check_config:
        return _check_config(config)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s oespec engine: %(message)s", datefmt="%H:%M:%S")
    from openengine.engine import serve

    try:
        asyncio.run(serve(config))
    except (ConfigError, CannotServe) as err:
        return _unservable(err)
    except OSError as err:
        sys.stderr.write(f"oespec engine: {err}\n")
        return 1
    return 0


def _check_config(config) -> int:
    """What the SDK would serve for `config`, without starting it."""
    from openengine.engine import ReferenceBackend, serve_config
    from openengine.serve import CannotServe, Server

    try:
        server = Server(ReferenceBackend(config), serve_config(config))
    except CannotServe as err:
        return _unservable(err)
    advertised = server.state.advertised
    sys.stdout.write(f"role {config.role}; profiles: {', '.join(f'{p.name} {p.version_text}' for p in advertised)}\n")
    for model in server.description.models:
        sys.stdout.write(f"model {model.name}: {', '.join(model.profiles) or 'no model-scoped profiles'}\n")
    return 0


def _unservable(err) -> int:
    sys.stderr.write("oespec engine: the configuration cannot be served:\n")
    sys.stderr.write("".join(f"  - {problem}\n" for problem in err.problems))
    return 2


def build_config(args: argparse.Namespace):
    from openengine.engine import ConfigError, EngineConfig, config_from_mapping, load_config_file

    config = EngineConfig()
    if args.config:
        config = config_from_mapping(load_config_file(args.config), config, source=args.config)
    changes = {key: getattr(args, key) for key in ("host", "port", "role", "token_delay_ms", "instance_id")
               if getattr(args, key) is not None}
    if args.profiles is not None:
        changes["profiles"] = tuple(p for p in args.profiles.split(",") if p.strip())
    if any(getattr(args, name, None) is not None for name in CONNECTION_FLAGS):
        changes["connections"] = connection_policy(args, config.connections)
    if args.limit:
        limits = {k: dict(v) for k, v in config.limits.items()}
        for item in args.limit:
            ref, sep, value = item.partition("=")
            profile, dot, name = ref.rpartition(".")
            if not sep or not dot:
                raise ConfigError([f"--limit {item!r}: write PROFILE.LIMIT=VALUE, e.g. core.max_sequences=2"])
            limits.setdefault(profile, {})[name] = _parse_value(value)
        changes["limits"] = limits
    admin = {key: getattr(args, f"admin_{key}")   # --admin-X sets the admin config's X
             for key in ("port", "host", "token", "tls_cert", "tls_key", "client_ca")
             if getattr(args, f"admin_{key}") is not None}
    if admin:
        changes["admin"] = dataclasses.replace(config.admin, **admin)
    return dataclasses.replace(config, **changes)


def _parse_value(text: str):
    """--limit values: true/false, integers, numbers, comma lists, else a string."""
    if "," in text:
        return [v for v in (p.strip() for p in text.split(",")) if v]
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text
