"""RPCs: which package a profile's RPCs may live in, and how their requests are named."""

from __future__ import annotations

from oespec.check.rule import CheckContext, Finding, rule
from openengine.contractkit.rules import Severity
GRPC_STANDARD_PREFIX = "grpc."


@rule("OE033", "rpc-package", requirements=("REQ-ADD-010",), category="rpcs",
      purpose="standard profiles own RPCs of the registry package (or standard grpc.* services); "
              "vendor profiles own none of the registry package")
def rpc_package(ctx: CheckContext):
    package = ctx.registry.package
    for profile, rpc in ctx.registry.all_rpcs():
        if not profile.standard and rpc.package == package:
            yield Finding(rpc.at("name"), f"vendor profile {profile.name} owns {rpc.name} in the standard package {package}",
                          "declare vendor RPCs in the vendor's own package, e.g. acme.v1.Turbo/Method")
        elif profile.standard and rpc.package != package and not rpc.service.startswith(GRPC_STANDARD_PREFIX):
            yield Finding(rpc.at("name"), f"standard profile {profile.name} owns {rpc.name} outside {package}",
                          f"declare the RPC in {package}, or move it to a vendor profile")


@rule("OE034", "rpc-request-name", requirements=("REQ-ADD-010",), severity=Severity.WARNING, category="rpcs",
      purpose="an RPC of the registry package takes a request named <Method>Request")
def rpc_request_name(ctx: CheckContext):
    package = ctx.registry.package
    for profile, rpc in ctx.registry.all_rpcs():
        if rpc.package != package:
            continue
        expected = rpc.method + "Request"
        request = rpc.request[len(package) + 1:] if rpc.request.startswith(package + ".") else rpc.request
        if request != expected:
            yield Finding(rpc.at("request"), f"{rpc.name} takes {rpc.request}, not {expected}",
                          f"name the request {expected} so each RPC can evolve its own request")


RULES = [rpc_package, rpc_request_name]
