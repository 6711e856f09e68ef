"""The governor per model bucket, against a ceiling that moves: its rule driven
by stepped events from a simulated API whose ceiling the test sets (no timing)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field, fields

import pytest

from gitrun.definition.schema import Limits, Packet
from gitrun.engine import governor as governor_module
from gitrun.engine.buckets import GovernorRecord, GovernorState
from gitrun.engine.congestion import Congestion
from gitrun.engine.governor import EndFacts, Governor
from gitrun.store.events import ConcurrencyChange
from gitrun.store.records import Fields

STEP = 0.01  # seconds of the stepped clock
LATENCY = 0.1  # a throttle comes back this long after its start


@dataclass
class SimulatedApi:
    """One model's API: it refuses a call that finds ``ceiling(now)`` calls
    held; a call it takes holds its slot for ``seconds``."""

    ceilings: list[tuple[float, int]]  # (from, ceiling), in order
    seconds: float = 1.0
    held: int = 0
    throttled: int = 0

    def ceiling(self, now: float) -> int:
        return [c for at, c in self.ceilings if now >= at][-1]


@dataclass
class Drive:
    """A run of ``tasks`` per stage, stages side by side, stepped by STEP."""

    gov: Governor
    apis: dict[str, SimulatedApi]  # by stage
    tasks: int
    canary: bool = True  # the run's first stage: one alone until one is valid
    # A call's slot is free this long before its attempt is seen to end (the
    # worker writes, exits, is reaped): a level counts attempts whose call ended.
    tail: float = 0.0
    now: float = 0.0
    left: dict[str, int] = field(default_factory=dict)
    out: list[tuple[float, str, str, float]] = field(default_factory=list)  # ends, task, stage
    freed: list[tuple[float, str]] = field(default_factory=list)  # (when, stage): a slot freed
    done: dict[str, float] = field(default_factory=dict)  # stage: when its last output came
    # (now, stage, the bucket's concurrency, calls the API holds)
    seen: list[tuple[float, str, int, int]] = field(default_factory=list)
    number: int = 0

    def run(self, until: float = 200.0) -> None:
        self.left = dict.fromkeys(self.apis, self.tasks)
        while (any(self.left.values()) or self.out) and self.now < until:
            for free in [f for f in self.freed if f[0] <= self.now]:
                self.freed.remove(free)
                self.apis[free[1]].held -= 1
            for end in [e for e in self.out if e[0] <= self.now]:
                self.out.remove(end)
                at, task, stage, began = end
                api = self.apis[stage]
                valid = task.startswith("ok")
                if valid:
                    self.done[stage] = at
                else:
                    self.left[stage] += 1
                outcome = "valid" if valid else "throttled"
                self.gov.ended(
                    EndFacts(task, outcome, at - began, 0, None, not valid, "", began), at
                )
            for stage, api in self.apis.items():
                running = sum(1 for e in self.out if e[2] == stage)
                slots = self.gov.slots(running, self.now, stage) if self.left[stage] else 0
                slots = min(slots, self.left[stage])
                if self.canary and stage not in self.done:
                    slots = min(slots, 1 - running)
                for _ in range(slots):
                    self.start(stage, api)
                concurrency = self.gov.bucket(stage).concurrency
                self.seen.append((self.now, stage, concurrency, api.held))
            self.now = round(self.now + STEP, 6)

    def start(self, stage: str, api: SimulatedApi) -> None:
        self.number += 1
        self.left[stage] -= 1
        if api.held < api.ceiling(self.now):
            api.held += 1
            task, ends = f"ok{self.number}", self.now + api.seconds + self.tail
            self.freed.append((self.now + api.seconds, stage))
        else:
            api.throttled += 1
            task, ends = f"no{self.number}", self.now + LATENCY
        self.gov.started(task, self.now, stage)
        self.out.append((ends, task, stage, self.now))

    def concurrency_at(self, stage: str, at: float) -> int:
        return [c for t, s, c, _ in self.seen if s == stage and t <= at][-1]

    def held(self, stage: str, since: float, until: float) -> float:
        """How many calls the API held on average from ``since`` to ``until``."""
        held = [h for t, s, _, h in self.seen if s == stage and since <= t < until]
        return sum(held) / len(held)


@pytest.fixture(autouse=True)
def _idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(governor_module, "read_load", lambda: 0.0)


def _governor(buckets: dict[str, str], concurrency: int = 16) -> Governor:
    limits = Limits(concurrency=concurrency)
    return Governor(
        limits, tasks=100_000, spawns=0, canary=[], rng=random.Random(7), stage_buckets=buckets
    )


def test_a_bucket_is_the_client_and_the_model_or_the_bucket_the_packet_names() -> None:
    packet = Packet.model_validate(
        {
            "run": {"id": "r"},
            "executor": {"preset": "claude"},
            "model": {
                "default": "claude-haiku-4-5",
                "stages": {"review": "claude-sonnet-4-5", "check": "claude-opus-4-1"},
                "buckets": {"claude-sonnet-4-5": "team", "claude-opus-4-1": "team"},
            },
            "stages": [{"name": "work"}, {"name": "review"}, {"name": "check"}],
        }
    )
    assert packet.bucket_for("work") == "claude/claude-haiku-4-5"
    assert packet.bucket_for("review") == packet.bucket_for("check") == "claude/team"


def test_a_throttled_model_never_slows_another() -> None:
    """Two models side by side, ceilings 3 and 6: each bucket learns its own."""
    gov = _governor({"a": "claude/small", "b": "claude/big"})
    apis = {"a": SimulatedApi([(0.0, 3)]), "b": SimulatedApi([(0.0, 6)])}
    drive = Drive(gov, apis, tasks=60)
    drive.run()
    assert gov.bucket("a").ceiling == 4 and gov.bucket("a").concurrency == 3
    assert gov.bucket("b").ceiling == 7 and gov.bucket("b").concurrency == 6
    # Each near its own oracle (60 / C seconds, and the canary's second), few throttled.
    assert drive.done["a"] <= 21 * 1.05 and drive.done["b"] <= 11 * 1.05
    assert apis["a"].throttled <= 3 and apis["b"].throttled <= 3


def test_stages_on_two_models_in_order_each_start_from_their_own_bucket() -> None:
    gov = _governor({"a": "claude/small", "b": "claude/big"})
    Drive(gov, {"a": SimulatedApi([(0.0, 3)])}, tasks=30).run()
    assert gov.concurrency == 3
    drive = Drive(gov, {"b": SimulatedApi([(0.0, 6)])}, tasks=60, canary=False)
    drive.now = 100.0
    drive.run(until=300.0)
    assert gov.buckets.current == "claude/big" and gov.concurrency == 6  # not held to 3
    assert gov.bucket("a").concurrency == 3  # and the first bucket keeps what it learned
    # Its first starts were paced by what the run knew of attempts' times:
    # one throttle (with those already on their way) found its ceiling.
    assert drive.apis["b"].throttled <= 2
    assert drive.done["b"] <= 100.0 + 10 * 1.1


def test_a_drop_is_followed_within_a_few_task_durations_and_a_rise_is_found() -> None:
    gov = _governor({"w": "claude/m"})
    api = SimulatedApi([(0.0, 8), (10.0, 4), (25.0, 12)])
    drive = Drive(gov, {"w": api}, tasks=300)
    drive.run()
    # Before the drop: just under... at the ceiling 8.
    assert drive.concurrency_at("w", 9.9) == 8
    # After the drop: under the new ceiling within three task durations, and held there.
    assert all(drive.concurrency_at("w", t) <= 4 for t in (13.0, 18.0, 24.9))
    # After the rise: the room found (12) within a few task durations.
    assert drive.held("w", 5.0, 10.0) >= 7.5
    assert drive.held("w", 13.0, 25.0) >= 3.5
    assert drive.held("w", 30.0, 35.0) >= 11
    # A bounded number of throttles: one per probe at most.
    assert api.throttled <= 10
    reasons = [c.reason for c in gov.take_changes()]
    assert any("the ceiling dropped" in r for r in reasons)
    assert any("climbing" in r for r in reasons)


def _at_ceiling(found: int) -> Congestion:
    """A bucket that found the ceiling ``found`` by climbing and has been
    running just under it, every level up to it proven."""
    bucket = Congestion(Limits(concurrency=16), random.Random(7), key="claude/m")
    for i in range(1, found + 1):
        bucket.started(f"c{i}", 0.1 * i)
    level = bucket.ended(f"c{found}")
    bucket.throttled(level, 0.1, 0.1 * found, 0.1 * found + 0.1)
    for i in range(1, found):
        level = bucket.ended(f"c{i}")
        bucket.valid(level, 1.0, 0.1 * i, 2.0 + 0.1 * i)
    assert (bucket.ceiling, bucket.concurrency) == (found, found - 1)
    return bucket


def test_a_refusal_above_where_a_drop_settled_is_the_ceiling_found_not_a_second_drop() -> None:
    """After a drop halves the bucket, it grows back; the first refusal on the
    way up finds the new ceiling. A start counts attempts whose calls have
    just ended (the worker still exits), so a level above the ceiling may
    seem to work: it is no proof that the refusal is a second drop."""
    bucket = _at_ceiling(9)
    for i in range(8):
        bucket.started(f"w{i}", 10.0 + 0.01 * i)
    level = bucket.ended("w7")
    bucket.throttled(level, 0.05, 10.07, 10.12)  # refused at 8: the ceiling dropped
    assert bucket.concurrency == 4
    for i in range(7):
        bucket.valid(bucket.ended(f"w{i}"), 1.0, 10.0 + 0.01 * i, 11.0)
    for i in range(4):  # grown back to 5; one started at level 5 got in
        bucket.started(f"g{i}", 11.1 + 0.01 * i)
    bucket.started("g4", 11.2)
    bucket.look(11.5)  # out for long enough: level 5 counted as taken
    assert bucket.proven == 5
    bucket.valid(bucket.ended("g0"), 1.0, 11.1, 11.55)
    bucket.started("g5", 11.6)
    level = bucket.ended("g5")
    assert level == 5
    bucket.throttled(level, 0.05, 11.6, 11.65)  # refused at 5, where g4 got in
    assert bucket.concurrency >= 4, bucket.reason
    assert "the ceiling found" in bucket.reason


def test_a_probe_taken_by_chance_then_refused_keeps_the_ceiling_probed_soon() -> None:
    """A probe that got in because a call out had just ended sets off a climb;
    the refusal at that level that follows is the probe refused, not a
    ceiling found by climbing (which would be probed eight times as rarely)."""
    bucket = _at_ceiling(9)
    bucket.moved = True
    for i in range(8):
        bucket.started(f"w{i}", 20.0)
    bucket.probe_at = 20.5
    bucket.look(20.5)
    assert bucket.concurrency == 9  # the probe may go
    bucket.started("probe", 20.6)
    bucket.look(21.0)  # out for long enough: taken, the bucket climbs
    assert "climbing" in bucket.reason
    bucket.valid(bucket.ended("w0"), 1.0, 20.0, 21.05)
    bucket.started("next", 21.1)  # at the probe's level, 9
    level = bucket.ended("next")
    bucket.throttled(level, 0.05, 21.1, 21.15)
    assert (bucket.ceiling, bucket.concurrency) == (9, 8)
    assert "the ceiling holds" in bucket.reason
    assert bucket.probe_at - 21.15 <= bucket.limits.grow_after * bucket.typical() + 1e-9


def test_the_driver_wakes_when_a_probe_out_counts_as_taken() -> None:
    gov = _governor({"w": "claude/m"})
    bucket = gov.bucket("w")
    bucket.throttle_slowest = 0.1
    bucket.proven = 3
    for i in range(4):
        gov.started(f"t{i}", 1.0 + i, "w")
    assert gov.next_wake(4.0) == pytest.approx(4.0 + 2 * 0.1)  # t3, at level 4


def test_a_probe_that_falls_due_starts_then_and_the_driver_wakes_for_it() -> None:
    """Just under a ceiling, every attempt out: nothing ends, and the probe's
    time comes. The driver wakes at that time, and the one call to slots
    that finds it due starts it (not the next call, an attempt's end later)."""
    gov = _governor({"w": "claude/m"})
    bucket = gov.bucket("w")
    for i in range(9):
        gov.started(f"c{i}", 0.1 * i, "w")
    gov.ended(EndFacts("c8", "throttled", 0.1, 1, None, True, "", 0.8), 0.9)
    for i in range(8):
        gov.ended(EndFacts(f"c{i}", "valid", 1.0, 0, None, False, "", 0.1 * i), 1.0 + 0.1 * i)
        gov.started(f"d{i}", 1.0 + 0.1 * i, "w")
    assert (bucket.ceiling, bucket.concurrency) == (9, 8)
    due = bucket.probe_at
    assert due > 2.0
    assert gov.next_wake(2.0) == pytest.approx(due)
    assert gov.slots(8, due - 0.01, "w") == 0
    assert gov.slots(8, due, "w") == 1
    assert "probe" in bucket.reason


def test_a_refusal_just_after_a_climb_found_the_ceiling_finds_it_lower_not_a_drop() -> None:
    """A climb's first refusal came at 14; a start right after, at 13, is
    refused too: the level 14 counted attempts whose refusals were on their
    way back. The ceiling is 13, not halved to 6."""
    bucket = Congestion(Limits(concurrency=16), random.Random(7), key="claude/m")
    for i in range(1, 15):
        bucket.started(f"c{i}", 0.1 * i)
    bucket.throttled(bucket.ended("c14"), 0.1, 1.4, 1.5)
    assert (bucket.ceiling, bucket.concurrency) == (14, 13)
    bucket.valid(bucket.ended("c1"), 1.4, 0.1, 1.51)
    bucket.started("next", 1.52)
    level = bucket.ended("next")
    assert level == 13
    bucket.throttled(level, 0.08, 1.52, 1.6)
    assert (bucket.ceiling, bucket.concurrency) == (13, 12), bucket.reason
    assert "the ceiling found" in bucket.reason
    # Later than a task duration on, a refusal at the level settled at is a drop.
    bucket.valid(bucket.ended("c2"), 1.4, 0.2, 3.9)
    bucket.started("late", 4.0)
    bucket.throttled(bucket.ended("late"), 0.08, 4.0, 4.1)
    assert "the ceiling dropped" in bucket.reason


def test_a_burst_s_level_is_the_highest_any_member_started_at() -> None:
    """A probe starts at 10; two attempts out end and another starts at once
    (at 9): one burst. Its level stays 10: a refusal of the probe is a probe
    refused, not a refusal at 9 (a level that worked, a drop)."""
    bucket = _at_ceiling(10)
    for i in range(9):
        bucket.started(f"w{i}", 5.0 + 0.1 * i)
    bucket.started("probe", 7.0)
    for i in range(2):
        bucket.valid(bucket.ended(f"w{i}"), 1.0, 5.0 + 0.1 * i, 7.01)
    bucket.started("next", 7.02)
    assert bucket.ended("probe") == 10
    bucket.throttled(10, 0.1, 7.0, 7.1)
    assert "the ceiling holds" in bucket.reason
    assert bucket.concurrency == 9


def test_a_start_after_a_refusal_is_of_a_burst_of_its_own() -> None:
    """Attempts end and are replaced a few ms apart around a probe at 11:
    the starts chain into one burst, at the probe's level. The probe is
    refused; a start right after it, at 10 (a level that works), is no
    longer of that race: it ends valid at 10, and the bucket does not take
    it for a probe taken and climb."""
    bucket = _at_ceiling(11)
    for i in range(10):
        bucket.started(f"w{i}", 3.0 + 0.1 * i)
    bucket.probe_at = 4.0
    bucket.look(5.0)
    assert bucket.concurrency == 11  # the probe is due

    def replace(ending: str, starting: str, now: float) -> None:
        began = bucket.since[ending]
        bucket.valid(bucket.ended(ending), now - began, began, now)
        bucket.started(starting, now)

    replace("w0", "r0", 5.00)
    bucket.started("probe", 5.01)
    replace("w1", "r1", 5.04)
    replace("w2", "r2", 5.08)
    bucket.throttled(bucket.ended("probe"), 0.1, 5.01, 5.11)
    assert "the ceiling holds" in bucket.reason
    replace("w3", "late", 5.12)
    assert bucket.levels["late"] == 10
    bucket.valid(bucket.ended("late"), 0.2, 5.12, 5.32)
    assert (bucket.ceiling, bucket.concurrency) == (11, 10), bucket.reason


def test_the_driver_wakes_for_the_next_paced_start_and_not_once_it_may_go() -> None:
    """Before any throttle the pace is an eighth of a typical attempt (at
    most 0.1 s), counted from the last start that raised the load, not from
    a start in an ended attempt's place. Once a start may go and none is
    waiting, pacing asks for no wake: the driver sleeps until an attempt
    ends instead of polling."""
    gov = _governor({"w": "claude/m"})
    bucket = gov.bucket("w")
    bucket.valid_durations = [0.4] * 9
    assert bucket.pace_gap() == pytest.approx(0.05)
    bucket.valid_durations = [1.0] * 9
    assert bucket.pace_gap() == pytest.approx(0.1)
    assert gov.slots(0, 0.0, "w") == 1
    gov.started("a", 0.0, "w")
    assert gov.slots(1, 0.0, "w") == 0 and gov.held == "pacing"
    assert gov.next_wake(0.0) == pytest.approx(0.1)
    assert gov.slots(1, 0.1, "w") == 1
    gov.started("b", 0.1, "w")  # raises the load to 2
    gov.ended(EndFacts("a", "valid", 1.0, 0, None, False, "", 0.0), 0.15)
    gov.started("c", 0.15, "w")  # in a's place: the load stays 2
    assert gov.slots(2, 0.15, "w") == 0 and gov.held == "pacing"
    assert gov.next_wake(0.15) == pytest.approx(0.2)  # b's start and the gap
    assert gov.slots(2, 0.25, "w") == 1 and gov.held == "pacing"  # a start may go now
    assert gov.next_wake(0.25) is None  # (nothing to start: no wake in the past)


def test_a_long_quiet_stretch_at_full_use_does_not_stop_upward_probing() -> None:
    gov = _governor({"w": "claude/m"})
    api = SimulatedApi([(0.0, 5), (300.0, 9)])
    drive = Drive(gov, {"w": api}, tasks=6000)
    drive.run(until=700.0)
    assert drive.held("w", 250.0, 300.0) >= 4.5
    assert drive.held("w", 450.0, 500.0) >= 8.5  # found, however long it held before
    assert api.throttled <= 12


def test_each_change_is_recorded_with_its_bucket_ceiling_and_reason() -> None:
    gov = _governor({"w": "codex/gpt"}, concurrency=4)
    for i in range(4):
        gov.started(f"t{i}", 0.0, "w")
    gov.ended(EndFacts("t3", "throttled", 0.1, 1, None, True, "", 0.0), 0.1)
    (change,) = gov.take_changes()
    assert (change.bucket, change.concurrency, change.ceiling) == ("codex/gpt", 3, 4)
    assert change.reason == "throttled at 4: the ceiling found"
    record = change.to_json()
    assert record["event"] == "concurrency"
    assert ConcurrencyChange.from_json(record) == change
    assert gov.take_changes() == []


def test_every_bucket_outlives_the_process_of_external_dispatch() -> None:
    gov = _governor({"a": "claude/small", "b": "claude/big"}, concurrency=8)
    gov.bucket("a").concurrency, gov.bucket("a").ceiling = 2, 3
    gov.bucket("b").concurrency = 6
    # b finds its ceiling at 7 by 10.5 s; a probe goes at 20 s.
    for i in range(7):
        gov.started(f"b{i}", 10.0 + 0.01 * i, "b")
    gov.ended(EndFacts("b6", "throttled", 0.44, 1, None, True, "", 10.06), 10.5)
    gov.bucket("b").probe_at = 20.0
    assert gov.slots(6, 20.0, "b") == 1
    gov.started("probe", 20.0, "b")
    taken_at = gov.bucket("b").taken_at()
    assert taken_at == pytest.approx(20.88)
    record = GovernorRecord.from_json(Fields(json.loads(json.dumps(gov.export().to_json()))))
    again = _governor({"a": "claude/small", "b": "claude/big"}, concurrency=8)
    again.restore(record)
    assert (again.bucket("a").concurrency, again.bucket("a").ceiling) == (2, 3)
    b = again.bucket("b")
    assert (b.concurrency, b.ceiling, b.found_at) == (7, 7, 10.5)
    # The next process knows when the probe out counts as taken, and so it is.
    assert b.taken_at() == pytest.approx(taken_at)
    again.slots(7, 21.0, "b")
    assert b.ceiling == 0 and "a probe at 7 was taken" in b.reason


def test_every_field_of_a_bucket_is_kept_between_calls_or_says_why_not() -> None:
    """External dispatch rebuilds each bucket from its record every call: a
    field added to Congestion is kept in GovernorState, or named here with
    the reason it need not be."""
    not_kept = {
        "limits": "the packet's, read again each call",
        "rng": "a fresh one each call",
        "key": "the record's key",
        "paced": "external dispatch is unpaced",
        "raised_at": "read only by pacing",
        "burst": "calls are more than a burst apart",
        "changes": "in the ledger as they are taken",
    }
    kept = {f.name for f in fields(GovernorState)}
    assert {f.name for f in fields(Congestion)} - kept == set(not_kept)
    assert kept <= {f.name for f in fields(Congestion)}


@pytest.mark.parametrize(
    ("now_takes", "refusals_at_most"),
    [(8, 0), (4, 3), (12, 0)],
    ids=["the same ceiling", "a lower ceiling since", "a higher ceiling since"],
)
def test_a_remembered_bucket_starts_at_what_it_knew_and_finds_a_moved_ceiling(
    now_takes: int, refusals_at_most: int
) -> None:
    """A bucket that another run left at 8 under a ceiling found at 9
    (gitrun.engine.memory): after the canary, where the API still takes 8
    the run goes at 8 at once with no refusal; where it takes fewer now,
    half goes out at once and the paced climb above it meets the new ceiling
    with a climb's refusals (the starts within one throttle's latency: 3
    here), where starting all 8 at once cost a drop and 10; where it takes
    more, a probe finds the room and the bucket climbs. Later probes (one
    refusal each) are the rule's ordinary price of a ceiling that may rise."""
    gov = _governor({"w": "claude/m"})
    gov.bucket("w").remembered(8, 9, "as run r1 left it 5 min ago")
    api = SimulatedApi([(0.0, now_takes)])
    drive = Drive(gov, {"w": api}, tasks=200)
    drive.run()
    changes = gov.take_changes()
    assert (changes[0].concurrency, changes[0].ceiling, changes[0].reason) == (
        8,
        9,
        "as run r1 left it 5 min ago",
    )
    probes_refused = sum(1 for c in changes if c.reason.startswith("probe at"))
    assert api.throttled - probes_refused <= refusals_at_most
    # The first wave after the canary (1 s) is not a climb from one.
    assert drive.held("w", 1.2, 2.0) >= min(now_takes, 8) / 2
    assert drive.held("w", 5.0, 10.0) >= min(now_takes, 8) - 1
