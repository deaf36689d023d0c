"""Start the upstream-only engine: `python -S engine.py --stubs DIR --site SITE_PACKAGES [options]`.

It stands for an engine of today's layout (what TensorRT-LLM serves): upstream OpenEngine v1's
`Inference` and `Control` services only, built on stubs generated from upstream's protos. `-S`
keeps the interpreter's site hooks out, so the project's editable `openengine` package cannot
shadow upstream's: the stub directory comes first on sys.path, then the site-packages given with
`--site` (grpc and protobuf), and the engine refuses to start if `openengine` resolves anywhere
else. The first line on stdout is the bound `host:port`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="upstream-test-engine", description=__doc__.splitlines()[0])
    p.add_argument("--stubs", default=os.environ.get("UPSTREAM_ENGINE_STUBS"),
                   help="directory holding openengine/v1/*_pb2*.py generated from upstream's protos "
                        "(default: $UPSTREAM_ENGINE_STUBS)")
    p.add_argument("--site", action="append", default=[],
                   help="a directory to import grpc and protobuf from (repeatable)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--slots", type=int, default=4, help="requests running at once; later ones queue")
    p.add_argument("--token-ms", type=float, default=4.0, help="milliseconds between an output's tokens")
    p.add_argument("--max-output-tokens", type=int, default=2048)
    p.add_argument("--max-context-length", type=int, default=8192)
    p.add_argument("--variant", default=None, help="plant one defect (see --list-variants)")
    p.add_argument("--list-variants", action="store_true", help="print the defects and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from variants import VARIANTS, describe     # plain data, no stubs needed

    if args.list_variants:
        print(describe())
        return 0
    if args.variant is not None and args.variant not in VARIANTS:
        print(f"unknown variant {args.variant!r}; --list-variants shows them", file=sys.stderr)
        return 2
    if not args.stubs:
        print("--stubs DIR (or UPSTREAM_ENGINE_STUBS) is required", file=sys.stderr)
        return 2
    from bootstrap import use_stubs

    problem = use_stubs(args.stubs, args.site)
    if problem:
        print(problem, file=sys.stderr)
        return 2

    from server import Config, serve

    config = Config(host=args.host, port=args.port, slots=args.slots, token_ms=args.token_ms,
                    max_output_tokens=args.max_output_tokens,
                    max_context_length=args.max_context_length, variant=args.variant)
    asyncio.run(serve(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
