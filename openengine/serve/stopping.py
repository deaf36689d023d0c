"""Stop conditions (REQ-CORE-013) for a backend to apply as it generates.

Stopping is the engine's own work: only the engine can stop a sequence where it stands, free
what it holds and still account for every token it used. What the protocol fixes is when a
sequence must end and what the client may see of the matched text; `SequenceStops` holds those
rules once, so a backend only feeds it each token it generates and does what it answers.
"""

from __future__ import annotations

from openengine.v1 import generation_pb2


class SequenceStops:
    """The stop conditions of one output sequence.

    Feed `add` every generated token with the text it adds. It answers the text that may be sent
    now and, when the output must end at this token, the `StopMatch` that ended it (a stop
    string, a stop token, or the end-of-sequence token). The matched stop string or stop token's
    text is part of the text only with `include_stop_in_output`; the end-of-sequence token's
    text never is. `min_tokens` holds every stop back until that many tokens were generated,
    and `ignore_eos` makes the end-of-sequence token an ordinary one. Text that could still turn out to be
    the start of a stop string is held back until it cannot; `rest()` gives it up when the
    output ends for another reason (length, abort).
    """

    def __init__(self, stopping: generation_pb2.StoppingOptions, eos_token_id: int | None = None):
        conditions = stopping.conditions
        self.strings = tuple(c.stop_text for c in conditions
                             if c.WhichOneof("condition") == "stop_text" and c.stop_text)
        self.token_ids = frozenset(c.stop_token_id for c in conditions if c.WhichOneof("condition") == "stop_token_id")
        self.eos_token_id = None if stopping.ignore_eos else eos_token_id
        self.include_stop = stopping.include_stop_in_output
        self.min_tokens = stopping.min_tokens if stopping.HasField("min_tokens") else 0
        self.longest = max((len(s) for s in self.strings), default=0)
        self.generated = 0
        self.text = ""
        self.sent = 0

    def add(self, token_id: int, text: str = "") -> tuple[str, generation_pb2.StopMatch | None]:
        self.generated += 1
        before = len(self.text)
        self.text += text
        if self.generated >= self.min_tokens:
            # A stop token's text is sent only when asked for; the end-of-sequence token's never.
            if token_id == self.eos_token_id:
                return self._end(before), generation_pb2.StopMatch(eos_token_id=token_id)
            if token_id in self.token_ids:
                return self._end(len(self.text) if self.include_stop else before), \
                    generation_pb2.StopMatch(stop_token_id=token_id)
            # Only a match that ends in the new text: an earlier one came before min_tokens.
            found = [(at, s) for s in self.strings
                     if (at := self.text.find(s, max(0, before - len(s) + 1))) >= 0]
            if found:
                at, stop = min(found)
                out = self._take(at + len(stop) if self.include_stop else at)
                self.sent = len(self.text)   # nothing after the match is ever sent
                return out, generation_pb2.StopMatch(stop_text=stop)
        return self._take(len(self.text) - self._held()), None

    def _end(self, upto: int) -> str:
        out = self._take(upto)
        self.sent = len(self.text)   # nothing after the stop is ever sent
        return out

    def rest(self) -> str:
        """Everything not sent yet: the sequence ended without a stop string."""
        return self._take(len(self.text))

    def _held(self) -> int:
        """Length of the longest unsent tail that begins some stop string."""
        for size in range(min(self.longest - 1, len(self.text) - self.sent), 0, -1):
            tail = self.text[-size:]
            if any(s.startswith(tail) for s in self.strings):
                return size
        return 0

    def _take(self, upto: int) -> str:
        if upto <= self.sent:
            return ""
        out, self.sent = self.text[self.sent:upto], upto
        return out
