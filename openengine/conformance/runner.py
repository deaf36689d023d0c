"""Run the suite against one engine: discover it, choose the cases, run each one with a timeout,
catch everything per case, apply the expected failures, and return a report."""

from __future__ import annotations

import asyncio
import datetime
import enum
import functools
import fnmatch
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health_pb2

from openengine.conformance.cases import all_cases
from openengine.conformance.cases.base import Case, Failed, Skipped, Unchecked
from openengine.conformance.context import (
    INFERENCE, Context, Contract, Options, load_contract, poll, status_name,
)
from openengine.conformance.matrix import Coverage, SpecRequirement, coverage
from openengine.conformance.target import preflight
from openengine.contract import CORE
from openengine.v1 import server_pb2


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    UNCHECKED = "unchecked"   # the requirement applies but this run could not observe it
    ERROR = "error"
    XFAIL = "xfail"     # failed (or errored), and listed as an expected failure
    STALE = "stale"     # listed as an expected failure, but passed: the entry must go

    @property
    def bad(self) -> bool:
        """Outcomes that make the run fail (exit status 1)."""
        return self in (Outcome.FAIL, Outcome.ERROR, Outcome.STALE)


@dataclass
class CaseResult:
    id: str
    profile: str
    requirements: tuple[str, ...]
    title: str
    outcome: Outcome
    reason: str = ""
    seconds: float = 0.0
    expected_reason: str = ""      # the expected-failures entry, when there is one


@dataclass
class Report:
    target: str
    engine: dict
    advertised: list[str]
    results: list[CaseResult]
    coverage: Coverage | None
    seconds: float = 0.0
    discovery_error: str | None = None
    forced: list[str] = field(default_factory=list)
    started_at: str = ""

    def counts(self) -> dict[str, int]:
        out = {str(o): 0 for o in Outcome}
        for r in self.results:
            out[str(r.outcome)] += 1
        return out

    @property
    def ok(self) -> bool:
        return bool(self.results) and not any(r.outcome.bad for r in self.results)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def unchecked_requirements(self) -> list[str]:
        """Requirements cited by an unchecked case that no case of this run reached a verdict on."""
        exercised = self.exercised()
        return sorted({req for r in self.results if r.outcome is Outcome.UNCHECKED
                       for req in r.requirements} - exercised)

    @property
    def verdict(self) -> str:
        """`CONFORMS`, `CONFORMS, N requirements unchecked` or `DOES NOT CONFORM: ...`."""
        if not self.results:
            return "NO VERDICT: no case ran"
        bad = [r for r in self.results if r.outcome.bad]
        if bad:
            return f"DOES NOT CONFORM: {len(bad)} case(s) " + ", ".join(r.id for r in bad)
        unchecked = self.unchecked_requirements()
        if unchecked:
            noun = "requirement" if len(unchecked) == 1 else "requirements"
            return f"CONFORMS, {len(unchecked)} {noun} unchecked: " + ", ".join(unchecked)
        return "CONFORMS"

    def exercised(self) -> set[str]:
        """Requirements cited by a case that reached a verdict in this run."""
        return {req for r in self.results if r.outcome in (Outcome.PASS, Outcome.FAIL, Outcome.XFAIL,
                                                           Outcome.STALE)
                for req in r.requirements}


def resolve_profiles(names: Iterable[str], contract: Contract) -> list[str]:
    """Full profile names for `--profile` values (short or full); ValueError for unknown ones."""
    out = []
    for name in names:
        info = contract.get(name) or contract.get(f"openengine.{name}")
        if info is None:
            known = ", ".join(p.short_name for p in contract.values())
            raise ValueError(f"unknown profile {name!r}; known: {known}")
        out.append(info.name)
    return out


def plan(cases: list[Case], advertised: set[str], *, selected: list[str] | None,
         patterns: list[str] | None = None, contract: Contract) -> tuple[list[Case], set[str]]:
    """The cases to run, in order (disruptive ones last), and the profiles forced by `--profile`:
    a named profile that is not advertised runs its cases as if it were. Without `--profile`
    every profile is in play, and each unadvertised one gets its absence case."""
    in_play = set(selected) if selected else set(contract)
    forced = (set(selected) - advertised) if selected else set()
    chosen = []
    for c in cases:
        if c.profile not in in_play:
            continue
        # The core is mandatory: its cases run even when an engine fails to list it.
        present = c.profile in advertised or c.profile in forced or c.profile == CORE
        if (c.when == "advertised") != present:
            continue
        if patterns and not any(fnmatch.fnmatchcase(c.id, p) for p in patterns):
            continue
        chosen.append(c)
    chosen.sort(key=lambda c: c.disruptive)
    return chosen, forced


def unmatched_patterns(cases: list[Case], patterns: list[str]) -> list[str]:
    """The `--case` globs that name no case at all (an argument error, not a verdict)."""
    return [p for p in patterns if not any(fnmatch.fnmatchcase(c.id, p) for c in cases)]


ProgressFn = Callable[[str, int, int, "CaseResult | None"], None]


async def _run_case(ctx: Context, c: Case, timeout: float) -> tuple[Outcome, str]:
    ctx.last_rpc = ""
    try:
        async with asyncio.timeout(timeout) as ctx.case_deadline:
            note = await c.fn(ctx)
        return Outcome.PASS, note or ""
    except Failed as err:
        return Outcome.FAIL, str(err)
    except Skipped as err:
        return Outcome.SKIP, str(err)
    except Unchecked as err:
        return Outcome.UNCHECKED, str(err)
    except TimeoutError:
        waiting = f" (the last call was {ctx.last_rpc})" if ctx.last_rpc else ""
        return Outcome.FAIL, (f"no verdict within {timeout:g} s: the engine did not answer in "
                              f"time{waiting}")
    except grpc.aio.AioRpcError as err:
        return Outcome.FAIL, ctx.describe_rpc_error(err)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # the run itself is being cancelled
        # grpc.aio raises CancelledError when a call it already cancelled is read again.
        return Outcome.ERROR, "an RPC of the case was cancelled under it (runner bug)"
    except Exception as err:  # a case could not reach a verdict: report, never crash the run
        return Outcome.ERROR, f"{type(err).__name__}: {err}"
    finally:
        ctx.case_deadline = None


def apply_expected(result: CaseResult, expected: dict[str, str]) -> CaseResult:
    """Turn a listed case's failure into `xfail` and its pass into `stale` (with the hint)."""
    if result.id not in expected:
        return result
    result.expected_reason = expected[result.id]
    if result.outcome in (Outcome.FAIL, Outcome.ERROR):
        result.outcome = Outcome.XFAIL
    elif result.outcome is Outcome.PASS:
        result.outcome = Outcome.STALE
        result.reason = ("passed, but is listed as an expected failure: remove the entry from "
                         "the expected-failures file")
    return result


async def _serving_before(ctx: Context, c: Case) -> str | None:
    """Why an Admin case (it pauses or reconfigures the engine) cannot start now, or None. The run
    began with the engine serving, so an engine found paused here did not come back from a case
    that resumed it: the engine's failure, reported on the case it keeps from running."""
    if c.profile != "openengine.admin" or c.when != "advertised" or c.disruptive:
        return None

    try:
        status = await ctx.check_health(INFERENCE)
    except grpc.aio.AioRpcError as err:
        return f"not run: health Check for openengine.v1.Inference failed with {status_name(err.code())}"
    if status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
        # It was SERVING when the run began, and every pause of the runner ended with a resume.
        return (f"not run: openengine.v1.Inference is {name} before this case, although it was "
                "SERVING when the run began and every pause or sleep of the runner ended with "
                "ResumeGeneration or WakeUp: the engine did not return to serving (REQ-HEALTH-007)")
    return None


async def _residue(ctx: Context, before: tuple[int, int] | None) -> str | None:
    """What a case left behind: requests the engine still counts beyond what it counted before
    the case, after a bounded wait. The case started and ended them, so their residue is its
    failure."""
    base = before or (0, 0)
    counts, freed = await poll(ctx.busy, lambda now: now is None or (now[0] <= base[0] and now[1] <= base[1]),
                               ctx.options.rpc_timeout)
    if freed:
        return None
    was = f" (it counted {base[0]} running and {base[1]} queued before the case)" if before else ""
    return (f"after this case ended (every request it made cancelled, aborted or finished), GetLoad "
            f"still counted {counts[0]} running and {counts[1]} queued requests "
            f"{ctx.options.rpc_timeout:g} s later{was}: "
            "the engine did not free them (REQ-CORE-010, REQ-CORE-011, REQ-LOAD-024.2)")


def _deserialize_logged(record: logging.LogRecord) -> bool:
    return "deserializing" not in record.getMessage()


def _engine_summary(ctx: Context) -> dict:
    info = ctx.server_info
    if info is None:
        return {}

    role = server_pb2.EngineRole.Name(info.engine_role) \
        if info.engine_role in server_pb2.EngineRole.values() else str(info.engine_role)
    return {"instance_id": info.instance_id, "engine_name": info.engine_name,
            "engine_version": info.engine_version, "role": role,
            "capability_revision": info.capability_revision,
            "schema_revision": info.schema_revision,
            "minimum_client_revision": info.minimum_client_revision,
            "schema_release": info.schema_release,
            "supported_models": list(info.supported_models),
            "discovery": "served" if ctx.has_discovery else
                         (ctx.discovery.capabilities_error or "not read"),
            "profiles": [{"name": p.name, "version": f"{p.major}.{p.minor}"}
                         for p in (ctx.capabilities.profiles if ctx.has_discovery else ())]}


async def run_suite(options: Options, *, profiles: list[str] | None = None,
                    patterns: list[str] | None = None, expected: dict[str, str] | None = None,
                    progress: ProgressFn | None = None,
                    requirements: Sequence[SpecRequirement] | None = None,
                    requirements_source: str | None = None) -> Report:
    """Run the conformance suite against `options.target` and return the report.

    Raises `TargetUnusable` when the target cannot be reached, does not speak gRPC or serves no
    OpenEngine discovery: that says nothing about conformance."""
    # grpc logs a reply that does not parse with its stack before failing the call; the case
    # reports the failed call, so the stack would only put a traceback into the run's output.
    # Each run adds a filter of its own, so runs side by side in one process do not remove
    # another's when they end.
    logger, quiet = logging.getLogger("grpc._common"), functools.partial(_deserialize_logged)
    logger.addFilter(quiet)
    contract = load_contract()
    cases = all_cases()
    selected = resolve_profiles(profiles, contract) if profiles else None
    expected = expected or {}
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    ctx = Context(options, contract)
    results: list[CaseResult] = []
    forced: set[str] = set()
    try:
        await ctx.open()
        await preflight(ctx)
        try:
            await asyncio.wait_for(ctx.discover(), options.rpc_timeout * 4 + 1)
        except asyncio.TimeoutError:
            ctx.discovery.error = "discovery did not finish in time"
        except Exception as err:  # the channel itself failed: treat as a discovery failure
            ctx.discovery.error = f"discovery failed: {type(err).__name__}: {err}"
        if ctx.server_info is None:
            chosen, _ = plan(cases, {CORE}, selected=selected, patterns=patterns, contract=contract)
            reason = ctx.discovery.error or "discovery failed"
            for c in chosen:
                outcome = Outcome.FAIL if c.id == "core.discovery.answers" else Outcome.ERROR
                results.append(CaseResult(c.id, c.profile, c.requirements, c.title, outcome,
                                          reason if outcome is Outcome.FAIL else
                                          f"not run: {reason}"))
            if not any(r.id == "core.discovery.answers" for r in results):
                results.insert(0, CaseResult("core.discovery.answers", CORE, ("REQ-CORE-001.1",),
                                             "discovery answers", Outcome.FAIL, reason))
        else:
            await ctx.locate_admin()
            chosen, forced = plan(cases, ctx.advertised_profiles, selected=selected,
                                  patterns=patterns, contract=contract)
            ctx.forced = forced
            for i, c in enumerate(chosen):
                if progress:
                    progress(c.id, i, len(chosen), None)
                t0 = time.monotonic()
                refused = await _serving_before(ctx, c)
                if refused:
                    outcome, reason = Outcome.FAIL, refused
                else:
                    # Cases that make requests start from an idle engine, boundedly: one whose count
                    # never returns to zero fails core.load.back-to-idle, and each case is judged only
                    # on what it adds to that count.
                    counts = c.when == "advertised" and not c.disruptive
                    before = await ctx.wait_idle(options.rpc_timeout) if counts else None
                    outcome, reason = await _run_case(ctx, c, c.timeout or options.case_timeout)
                    residue = await _residue(ctx, before) if counts else None
                    if residue and outcome is Outcome.FAIL:
                        reason = f"{reason}; and {residue}"
                    elif residue:
                        outcome, reason = Outcome.FAIL, residue + (f" ({reason})" if reason else "")
                result = apply_expected(CaseResult(c.id, c.profile, c.requirements, c.title,
                                                   outcome, reason, time.monotonic() - t0), expected)
                results.append(result)
                if progress:
                    progress(c.id, i + 1, len(chosen), result)
    finally:
        await ctx.close()
        logger.removeFilter(quiet)
    for r in results:
        if not r.expected_reason:
            apply_expected(r, expected)
    try:
        cov = coverage(cases, requirements, source=requirements_source)
    except Exception:
        cov = None
    return Report(options.target, _engine_summary(ctx), sorted(ctx.advertised_profiles), results,
                  cov, time.monotonic() - started, ctx.discovery.error, sorted(forced),
                  started_at=started_at)


def run(options: Options, **kw) -> Report:
    """Synchronous wrapper of `run_suite`."""
    return asyncio.run(run_suite(options, **kw))
