"""The engine's run state as one value, and the one table of the transitions between states.

A state is the phase (`EngineState`: SERVING, PAUSED, DRAINING, SLEEPING, STOPPING) plus what the
phase needs to be complete: how generation was paused and what is asleep. Admin calls and
shutdown are events; `TRANSITIONS` says which phase each event leads to from each phase, and an
event the table does not list raises `IllegalTransition` instead of leaving the engine in a state
nobody designed (paused while asleep, say). `transition` is a pure function; the runtime applies
its result (health, runtime events, log).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from openengine.v1 import events_pb2

SERVING = events_pb2.ENGINE_STATE_SERVING
PAUSED = events_pb2.ENGINE_STATE_PAUSED
DRAINING = events_pb2.ENGINE_STATE_DRAINING
SLEEPING = events_pb2.ENGINE_STATE_SLEEPING
STOPPING = events_pb2.ENGINE_STATE_STOPPING

# Everything asleep: a Sleep without tags.
ALL_TAGS = "all"


@dataclass(frozen=True)
class RunState:
    phase: int = SERVING
    pause_mode: str = ""                                       # while PAUSED: abort, wait or keep
    sleep_tags: frozenset[str] = field(default_factory=frozenset)   # while SLEEPING: what sleeps
    sleep_level: int = 0                                       # while SLEEPING: the deepest level asked

    @property
    def name(self) -> str:
        return events_pb2.EngineState.Name(self.phase)

    @property
    def accepting(self) -> bool:
        """New work is taken only while SERVING (REQ-HEALTH-007)."""
        return self.phase == SERVING

    @property
    def holds_requests(self) -> bool:
        """Paused with mode keep: requests in flight stay, but make no progress."""
        return self.phase == PAUSED and self.pause_mode == "keep"


# (phase, event) -> the phase it leads to. Anything not listed is illegal.
TRANSITIONS: dict[tuple[int, str], int] = {
    (SERVING, "pause"): PAUSED, (SERVING, "drain"): DRAINING, (SERVING, "sleep"): SLEEPING,
    (PAUSED, "pause"): PAUSED, (PAUSED, "resume"): SERVING, (PAUSED, "drain"): DRAINING,
    (PAUSED, "sleep"): SLEEPING,
    (DRAINING, "drain"): DRAINING, (DRAINING, "resume"): SERVING, (DRAINING, "pause"): PAUSED,
    (DRAINING, "sleep"): SLEEPING,
    (SLEEPING, "sleep"): SLEEPING, (SLEEPING, "wake"): SERVING, (SLEEPING, "wake-partly"): SLEEPING,
    **{(phase, "stop"): STOPPING for phase in (SERVING, PAUSED, DRAINING, SLEEPING, STOPPING)},
}

# What to do instead, for the refusals a client can act on.
_INSTEAD = {SLEEPING: "call WakeUp first", STOPPING: "the engine is shutting down",
            SERVING: "the engine is serving", PAUSED: "call ResumeGeneration first",
            DRAINING: "call ResumeGeneration first"}


class IllegalTransition(Exception):
    """An event the transition table does not allow in the current state."""

    def __init__(self, state: RunState, event: str):
        self.state, self.event = state, event
        super().__init__(f"{event} is not allowed while the engine is {state.name}: {_INSTEAD[state.phase]}")


def transition(state: RunState, event: str, *, mode: str = "", tags: frozenset[str] = frozenset(),
               level: int = 0) -> RunState:
    """The state after `event` (pause with `mode`; sleep or wake with `tags`, sleep with `level`).
    Raises IllegalTransition when the table does not list the event for the current phase."""
    if event == "wake" and state.phase == SLEEPING and tags:
        remaining = state.sleep_tags - tags
        if remaining - {ALL_TAGS}:   # something named is still asleep
            event = "wake-partly"
    phase = TRANSITIONS.get((state.phase, event))
    if phase is None:
        raise IllegalTransition(state, event)
    if event == "pause":
        return RunState(PAUSED, pause_mode=mode)
    if event == "sleep":
        return RunState(SLEEPING, sleep_tags=state.sleep_tags | (tags or {ALL_TAGS}),
                        sleep_level=max(state.sleep_level, level))
    if event == "wake-partly":
        return RunState(SLEEPING, sleep_tags=state.sleep_tags - tags, sleep_level=state.sleep_level)
    return RunState(phase)
