"""The defects the upstream-only engine can be started with, one at a time (`--variant NAME`).

Each breaks a single clause of upstream v1's API reference, so a judge of that engine has exactly
one thing to find. Plain data: the engine (run with only upstream's stubs) and the tests (run with
the project's own package) both read it.
"""

from __future__ import annotations

VARIANTS: dict[str, str] = {
    "ignores-max-tokens":
        "stopping.max_tokens is not applied: a sequence runs to EOS or max_output_tokens",
    "no-usage":
        "the final response carries no usage",
    "usage-wrong-total":
        "usage.total_tokens counts the completion only, not prompt + completion",
    "usage-on-every-response":
        "usage is set on every response, not only on the final one",
    "missing-output-index":
        "TokenOutput leaves output_index unset for output 0",
    "no-finished-event":
        "streams end without GenerationFinished (usage rides on the last TokenOutput)",
    "finished-twice":
        "output 0 gets two GenerationFinished events",
    "request-id-not-echoed":
        "request_id is set on the first response only",
    "stop-text-ignored":
        "stop_text conditions never end a sequence",
    "stop-token-ignored":
        "stop_token_id conditions never end a sequence",
    "stop-text-in-output":
        "a matched stop_text stays in the output although include_stop_in_output is unset",
    "no-stop-match":
        "a sequence ended by a stop condition or EOS reports no stop_match",
    "length-reported-as-stop":
        "a sequence cut at max_tokens reports FINISH_REASON_STOP instead of LENGTH",
    "min-tokens-ignored":
        "stopping.min_tokens does not hold back EOS or stop conditions",
    "seed-ignored":
        "sampling.seed is not used: equal seeds give different outputs",
    "num-sequences-ignored":
        "sampling.num_sequences is not applied: one output is generated whatever was asked",
    "logprobs-ignored":
        "return_output_logprobs and output_candidates are accepted but nothing is returned",
    "abort-ignored":
        "Abort answers ABORTED but the request keeps streaming to its end",
    "abort-no-cancelled":
        "an aborted stream ends without GenerationFinished(CANCELLED) for its open outputs",
    "abort-unknown-ok":
        "Abort naming an unknown request_id answers ABORTED instead of NOT_FOUND",
    "abort-finished-not-found":
        "Abort naming a request that finished recently answers NOT_FOUND, not ALREADY_FINISHED",
    "abort-no-target-ok":
        "Abort with no target answers ABORTED instead of INVALID_ARGUMENT",
    "load-never-idle":
        "GetLoad always counts one phantom running request",
    "load-always-zero":
        "GetLoad reports zero running and zero queued requests whatever runs",
    "revision-too-new":
        "GetServerInfo says minimum_client_revision 2, which a revision-1 client must reject",
    "schema-revision-zero":
        "GetServerInfo leaves schema_revision at zero, which is invalid",
    "model-info-unknown-ok":
        "GetModelInfo for an unknown model answers the served model instead of NOT_FOUND",
    "health-not-ready":
        "Health answers NOT_READY while the engine serves",
}


def describe() -> str:
    """The table as `--list-variants` prints it: one `NAME  description` line each."""
    width = max(map(len, VARIANTS))
    return "\n".join(f"{name:<{width}}  {text}" for name, text in VARIANTS.items())
