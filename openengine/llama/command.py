"""`oespec engine --backend llama --model FILE.gguf`: serve a GGUF model over OpenEngine.

The command's flags that describe the server (address, profiles, instance id, admin access, log
level) mean what they mean for the reference engine; `--limit` sets the limits the llama backend
has (`LIMITS`) and `--threads` llama.cpp's threads; the flags of the reference engine's stand-in
model (role, token delay, configuration file) are refused, naming the flag.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

# --limit name -> LlamaConfig field.
LIMITS = {f"core.{field}": field
          for field in ("max_running_requests", "max_queued_requests", "max_batch_tokens", "max_logprobs")}
REFERENCE_ONLY = {"role": "--role",
                  "token_delay_ms": "--token-delay-ms", "config": "--config",
                  "check_config": "--check-config"}


class UsageError(Exception):
    pass


def llama_config(args: argparse.Namespace):
    from openengine.llama.llama_backend import LlamaConfig

    used = [flag for name, flag in REFERENCE_ONLY.items() if getattr(args, name, None)]
    if used:
        raise UsageError(f"{', '.join(used)}: only the reference engine takes "
                         f"{'this flag' if len(used) == 1 else 'these flags'}; leave "
                         f"{'it' if len(used) == 1 else 'them'} out with --backend llama")
    if not args.model:
        raise UsageError("--backend llama needs --model FILE.gguf, the model to serve")
    values = {}
    for item in args.limit or ():
        name, sep, value = item.partition("=")
        field = LIMITS.get(name.removeprefix("openengine."))
        if not sep or field is None:
            raise UsageError(f"--limit {item!r}: the llama backend sets "
                             f"{', '.join(f'{k}=N' for k in LIMITS)}")
        try:
            values[field] = int(value)
        except ValueError:
            raise UsageError(f"--limit {item!r}: {value!r} is not a whole number") from None
    if args.threads is not None:
        values["threads"] = args.threads
    config = LlamaConfig(model_path=args.model, **values)
    problems = config.problems()
    if problems:
        raise UsageError("; ".join(problems))
    return config


def serve_config(args: argparse.Namespace):
    from openengine.serve import AdminAccess, ConnectionPolicy, ServeConfig

    profiles = None
    if args.profiles is not None and args.profiles.strip() != "all":
        profiles = tuple(p.strip() for p in args.profiles.split(",") if p.strip())
    admin = AdminAccess(token=args.admin_token, port=args.admin_port, host=args.admin_host,
                        tls_cert=args.admin_tls_cert, tls_key=args.admin_tls_key,
                        client_ca=args.admin_client_ca)
    return ServeConfig(host=args.host or "127.0.0.1", port=50051 if args.port is None else args.port,
                       profiles=profiles, instance_id=args.instance_id, admin=admin,
                       connections=getattr(args, "connections", None) or ConnectionPolicy())


def run(args: argparse.Namespace) -> int:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        sys.stderr.write("oespec engine: --backend llama needs llama-cpp-python; install it with "
                         "`make llama` (pinned in requirements-llama.txt)\n")
        return 2
    try:
        config = llama_config(args)
        served = serve_config(args)
    except UsageError as err:
        sys.stderr.write(f"oespec engine: {err}\n")
        return 2
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s oespec engine: %(message)s", datefmt="%H:%M:%S")
    from openengine.llama.llama_backend import LlamaBackend
    from openengine.llama.native import ModelLoadError
    from openengine.serve import CannotServe, serve

    async def main() -> None:
        backend = LlamaBackend(config)
        try:
            await serve(backend, served)
        finally:
            backend.close()

    try:
        asyncio.run(main())
    except ModelLoadError as err:
        sys.stderr.write(f"oespec engine: {err}\n")
        return 2
    except CannotServe as err:
        sys.stderr.write(f"oespec engine: the llama backend cannot serve this: {err}\n")
        return 2
    except OSError as err:
        sys.stderr.write(f"oespec engine: {err}\n")
        return 1
    return 0
