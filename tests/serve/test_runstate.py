"""The run state is one value (phase, pause mode, sleep tags) changed only through the transition
table; an event the table does not allow raises, naming the state."""

from __future__ import annotations

import pytest

from openengine.serve.runstate import (
    DRAINING, PAUSED, SERVING, SLEEPING, STOPPING, TRANSITIONS, IllegalTransition, RunState, transition,
)

def allowed(state: RunState, event: str) -> bool:
    return (state.phase, event) in TRANSITIONS


PHASES = (SERVING, PAUSED, DRAINING, SLEEPING, STOPPING)
EVENTS = ("pause", "resume", "drain", "sleep", "wake", "stop")


def test_every_event_not_in_the_table_raises_and_names_the_state():
    for phase in PHASES:
        state = RunState(phase, sleep_tags=frozenset({"weights"}) if phase == SLEEPING else frozenset())
        for event in EVENTS:
            if (phase, event) in TRANSITIONS:
                assert transition(state, event, mode="abort").phase == TRANSITIONS[phase, event]
            else:
                with pytest.raises(IllegalTransition) as err:
                    transition(state, event)
                assert state.name in str(err.value) and event in str(err.value)


def test_stopping_is_final_and_sleep_must_be_woken_first():
    assert [e for e in EVENTS if allowed(RunState(STOPPING), e)] == ["stop"]
    asleep = RunState(SLEEPING, sleep_tags=frozenset({"weights"}))
    assert not allowed(asleep, "pause") and not allowed(asleep, "drain") and not allowed(asleep, "resume")


def test_pause_mode_and_sleep_tags_are_part_of_the_state():
    kept = transition(RunState(), "pause", mode="keep")
    assert kept == RunState(PAUSED, pause_mode="keep") and kept.holds_requests and not kept.accepting
    assert not transition(kept, "pause", mode="abort").holds_requests    # a new pause replaces the mode
    assert transition(kept, "resume") == RunState(SERVING)
    asleep = transition(RunState(), "sleep", tags=frozenset({"weights"}), level=1)
    deeper = transition(asleep, "sleep", tags=frozenset({"kv_cache"}), level=2)
    assert deeper.sleep_tags == {"weights", "kv_cache"} and deeper.sleep_level == 2
    partly = transition(deeper, "wake", tags=frozenset({"weights"}))
    assert partly == RunState(SLEEPING, sleep_tags=frozenset({"kv_cache"}), sleep_level=2)
    assert transition(partly, "wake", tags=frozenset({"kv_cache"})) == RunState(SERVING)
    assert transition(transition(RunState(), "sleep"), "wake") == RunState(SERVING)   # no tags: everything
