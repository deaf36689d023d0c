"""A Generate stream read back as upstream's events, and every way its shape breaks the contract
(REQ-CORE-009, -015, -016, -017), so every case names a broken shape the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from openengine.v1 import error_pb2, generation_pb2


@dataclass
class Output:
    index: int
    tokens: list = field(default_factory=list)      # TokenInfo records, in order
    text: str = ""
    texts: list = field(default_factory=list)       # each token event's text, the empty ones left out
    finished: Any = None                            # GenerationFinished, once it came
    after_finished: int = 0                         # events of this output after its finished

    @property
    def token_ids(self) -> list[int]:
        return [t.token_id for t in self.tokens]


def finish_reason_name(value: int) -> str:
    try:
        return generation_pb2.FinishReason.Name(value)
    except ValueError:
        return f"{value} (not a FinishReason)"


def error_code_name(value: int) -> str:
    try:
        return error_pb2.ErrorCode.Name(value)
    except ValueError:
        return f"{value} (not an ErrorCode)"


def ending(last, tokens: int) -> str:
    """How a Generate stream ended, from its last message (None or EOF when it ended without a
    terminal one) and the tokens it carried, in the words of the protocol."""
    if last is None or last is grpc.aio.EOF or last.HasField("token"):
        return f"ended with OK after {tokens} tokens and no finished event"
    if last.HasField("error"):
        return (f"ended after {tokens} tokens with an EngineError of code "
                f"{error_code_name(last.error.code)} ({last.error.message!r})")
    if last.HasField("finished"):
        return (f"ended after {tokens} tokens with a finished event, reason "
                f"{finish_reason_name(last.finished.reason)}")
    return f"ended after a {last.WhichOneof('event')} event"


class Stream:
    """Every response of one finished Generate stream, by event."""

    def __init__(self, responses: list, request=None):
        self.responses = list(responses)
        self.request = request
        self.kinds = [r.WhichOneof("event") for r in self.responses]
        self.outputs: dict[int, Output] = {}
        self.prompt = None
        self.prompt_at: list[int] = []
        self.error = None
        self.prefill = None
        self.unindexed: list[str] = []     # token/finished events without output_index
        for i, r in enumerate(self.responses):
            kind = self.kinds[i]
            if kind == "prompt":
                self.prompt = r.prompt
                self.prompt_at.append(i)
            elif kind in ("token", "finished"):
                event = getattr(r, kind)
                if not event.HasField("output_index"):
                    self.unindexed.append(kind)
                out = self.outputs.setdefault(event.output_index, Output(event.output_index))
                if out.finished is not None:
                    out.after_finished += 1
                    continue
                if kind == "token":
                    out.tokens.extend(event.tokens)
                    out.text += event.text
                    if event.text:
                        out.texts.append(event.text)
                else:
                    out.finished = event
            elif kind == "error":
                self.error = self.error or r.error
            elif kind == "prefill_ready":
                self.prefill = r.prefill_ready

    @property
    def usage(self):
        """The usage the last response carries."""
        final = self.responses[-1] if self.responses else None
        return final.usage if final is not None and final.HasField("usage") else None

    def output(self, index: int = 0) -> Output:
        return self.outputs.get(index) or Output(index)

    @property
    def completion_tokens(self) -> int:
        return sum(len(o.tokens) for o in self.outputs.values())

    def failure(self) -> str | None:
        """The terminal EngineError of a request that should have succeeded, as a sentence."""
        if self.error is None:
            return None
        return (f"the request ended with an EngineError (code {error_code_name(self.error.code)}: "
                f"{self.error.message!r})")

    def shape_problems(self, *, outputs: int = 1, request_id: str | None = None) -> list[str]:
        """Every way this stream breaks the stream rules of the core, for a request that asked
        for `outputs` outputs (REQ-CORE-009, REQ-CORE-015, REQ-CORE-016, REQ-CORE-017)."""
        out: list[str] = []
        if not self.responses:
            return ["the Generate stream ended with OK and no message: an accepted stream sends "
                    "a finished event for each output (or one error) before it ends (REQ-CORE-009.1)"]
        ids = {r.request_id for r in self.responses}
        if request_id:
            wrong = sorted(i for i in ids if i != request_id)
            if wrong:
                out.append(f"responses carried request_id {wrong[0]!r}, not the request's "
                           f"{request_id!r} (REQ-CORE-015)")
        elif len(ids) != 1 or "" in ids:
            out.append(f"responses carried request ids {sorted(ids)}: every response carries the "
                       "one id the engine gave the request (REQ-CORE-015)")
        if self.unindexed:
            out.append(f"{len(self.unindexed)} {self.unindexed[0]} event(s) left output_index unset: "
                       "every token and finished event sets it, 0 included (REQ-CORE-016.1)")
        bad = sorted(i for i in self.outputs if i >= outputs)
        if bad:
            out.append(f"events for output {bad[0]}, but the request asked for {outputs} "
                       f"output(s) (REQ-CORE-016.1)")
        if self.prompt_at and (self.prompt_at != [0]):
            out.append(f"the prompt event came {len(self.prompt_at)} time(s), at position(s) "
                       f"{self.prompt_at}: at most once, first (REQ-CORE-016.3)")
        for index, output in self.outputs.items():
            texts = output.texts
            if len(texts) >= 3 and all(b.startswith(a) and len(b) > len(a) for a, b in zip(texts, texts[1:])):
                out.append(f"output {index}'s token text is cumulative: each event repeats the text "
                           "before it, where it carries only what is new (REQ-CORE-016.2)")
                break
        nothing = [k for k in self.kinds if k is None]
        if nothing:
            out.append(f"{len(nothing)} response(s) set no event (REQ-CORE-009.1)")
        if self.error is None and self.prefill is None:
            missing = [i for i in range(outputs) if self.output(i).finished is None]
            if missing:
                out.append(f"output(s) {missing} never got a finished event, and no error ended "
                           "the request (REQ-CORE-009.1)")
        for o in self.outputs.values():
            if o.after_finished:
                out.append(f"{o.after_finished} event(s) of output {o.index} followed its finished "
                           "event (REQ-CORE-009.2)")
        terminal = [i for i, k in enumerate(self.kinds) if k in ("error", "prefill_ready")]
        if terminal and terminal[0] != len(self.kinds) - 1:
            out.append(f"{len(self.kinds) - 1 - terminal[0]} response(s) followed the terminal "
                       f"{self.kinds[terminal[0]]} event (REQ-CORE-009.2)")
        with_usage = [i for i, r in enumerate(self.responses) if r.HasField("usage")]
        last = len(self.responses) - 1
        if last not in with_usage:
            out.append(f"the final response ({self.kinds[-1]}) carries no usage (REQ-CORE-017.1)")
        early = [i for i in with_usage if i != last]
        if early:
            out.append(f"usage was set on {len(early)} response(s) before the final one "
                       f"(first on a {self.kinds[early[0]]} event): only the final response "
                       "carries it (REQ-CORE-017.1)")
        usage = self.usage
        if usage is not None:
            if usage.total_tokens != usage.prompt_tokens + usage.completion_tokens:
                out.append(f"usage.total_tokens {usage.total_tokens} != prompt_tokens "
                           f"{usage.prompt_tokens} + completion_tokens {usage.completion_tokens} "
                           "(REQ-CORE-017.2)")
            if usage.HasField("cached_prompt_tokens") and usage.cached_prompt_tokens > usage.prompt_tokens:
                out.append(f"usage.cached_prompt_tokens {usage.cached_prompt_tokens} exceeds "
                           f"prompt_tokens {usage.prompt_tokens} (REQ-CORE-017.4)")

        for o in self.outputs.values():
            f = o.finished
            if f is None:
                continue
            if f.reason == generation_pb2.FINISH_REASON_UNSPECIFIED:
                out.append(f"output {o.index}'s finished event has no reason (REQ-CORE-009.1)")
            has_match = f.HasField("stop_match") and f.stop_match.WhichOneof("match") is not None
            if f.reason == generation_pb2.FINISH_REASON_STOP and not has_match:
                out.append(f"output {o.index} finished with FINISH_REASON_STOP but no stop_match "
                           "(REQ-CORE-018)")
            if f.reason != generation_pb2.FINISH_REASON_STOP and has_match:
                out.append(f"output {o.index} finished with {finish_reason_name(f.reason)} but set "
                           "stop_match (REQ-CORE-018)")
        return out

    def counted_tokens(self) -> int:
        """Tokens generated: those delivered, plus a stop token the output kept out (REQ-CORE-017.3)."""
        total = self.completion_tokens
        keep = self.request is not None and self.request.stopping.include_stop_in_output
        for o in self.outputs.values():
            f = o.finished
            if f is not None and f.HasField("stop_match") and not keep:
                match = f.stop_match.WhichOneof("match")
                if match == "stop_token_id" and f.stop_match.stop_token_id not in o.token_ids[-1:]:
                    total += 1
        return total
