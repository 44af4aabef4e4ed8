"""A small stateful workplace (people, a calendar, mail) and its state-checked tasks: the world
of the `workplace` function-calling environment, after the Workplace Assistant environment the
Cascade 2 multi-domain RL stage uses.

A world is generated from a seed, so a task row carries only `{"seed", "goal"}` (its
`workplace` column). The tools read and change the world; a goal is reached when the world
after the episode equals the world after the goal's known solution (nothing missing, nothing
extra: a stray email or a cancelled meeting that should stay fails it) and, for a question, the
final answer holds the asked value. The reward replays the episode's tool calls, as written in
its transcript, on a fresh copy of the world: the state it checks is computed here from the
calls, never taken from anything the episode printed or stored.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from curation.verify.result import Verdict
from schemas.tool_calls import function_tool

FIRST = ("Ada", "Bo", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea")
LAST = ("Park", "Quist", "Rossi", "Sato", "Tran", "Ueda", "Voss", "Wong", "Xu", "Yates")
TITLES = ("Budget review", "Design sync", "Hiring panel", "Launch prep", "Retro", "Roadmap")
SUBJECTS = ("Quarterly numbers", "Offsite plan", "Contract draft", "Team lunch", "Bug triage")
GOALS = ("schedule", "email", "cancel", "lookup")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class WorkplaceError(ValueError):
    """A tool call the world refuses (unknown person, bad date, no such event)."""


_S = {"type": "string"}
WORKPLACE_TOOLS = (
    function_tool("find_user", "People whose name contains `name`.", {"name": _S}, ["name"]),
    function_tool("list_events", "Meetings on a date (YYYY-MM-DD).", {"date": _S}, ["date"]),
    function_tool(
        "create_event",
        "Create a meeting; attendees are email addresses.",
        {"title": _S, "date": _S, "attendees": {"type": "array", "items": _S}},
        ["title", "date", "attendees"],
    ),
    function_tool(
        "cancel_event",
        "Cancel a meeting by its id.",
        {"event_id": {"type": "integer"}},
        ["event_id"],
    ),
    function_tool(
        "send_email",
        "Send an email to one address.",
        {"to": _S, "subject": _S, "body": _S},
        ["to", "subject"],
    ),
)


@dataclass
class World:
    """People, meetings and sent mail."""

    people: list[dict[str, str]]
    events: list[dict[str, Any]]
    outbox: list[dict[str, str]] = field(default_factory=list)
    next_id: int = 1

    @classmethod
    def from_seed(cls, seed: int) -> World:
        rng = random.Random(seed)
        names = rng.sample([f"{f} {s}" for f in FIRST for s in LAST], 6)
        people = [
            {"name": n, "email": n.lower().replace(" ", ".") + "@corp.example"} for n in names
        ]
        world = cls(people, [])
        for _ in range(3):
            attendees = sorted(p["email"] for p in rng.sample(people, 2))
            world.create_event(rng.choice(TITLES), _date(rng), attendees)
        return world

    def state(self) -> dict[str, Any]:
        """What a goal is checked against: meetings (without ids) and mail, in a fixed order."""
        events = sorted((e["title"], e["date"], tuple(sorted(e["attendees"]))) for e in self.events)
        mail = sorted((m["to"], m["subject"]) for m in self.outbox)
        return {"events": events, "outbox": mail}

    # ------------------------------------------------------------------ the tools -----------

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Run one tool; WorkplaceError when the world refuses it."""
        tools = {
            "find_user": self.find_user,
            "list_events": self.list_events,
            "create_event": self.create_event,
            "cancel_event": self.cancel_event,
            "send_email": self.send_email,
        }
        if name not in tools:
            raise WorkplaceError(f"no tool {name!r}")
        try:
            return tools[name](**arguments)
        except TypeError as exc:
            raise WorkplaceError(f"{name}: {exc}") from None

    def find_user(self, name: str) -> list[dict[str, str]]:
        return [p for p in self.people if str(name).lower() in p["name"].lower()]

    def list_events(self, date: str) -> list[dict[str, Any]]:
        _check_date(date)
        return [e for e in self.events if e["date"] == date]

    def create_event(self, title: str, date: str, attendees: list[str]) -> dict[str, Any]:
        _check_date(date)
        known = {p["email"] for p in self.people}
        if not isinstance(attendees, list) or not attendees:
            raise WorkplaceError("attendees must be a non-empty list of email addresses")
        unknown = [a for a in attendees if a not in known]
        if unknown:
            raise WorkplaceError(f"unknown attendee(s): {', '.join(map(str, unknown))}")
        event = {
            "id": self.next_id,
            "title": str(title),
            "date": date,
            "attendees": list(attendees),
        }
        self.next_id += 1
        self.events.append(event)
        return event

    def cancel_event(self, event_id: int) -> str:
        for event in self.events:
            if event["id"] == event_id:
                self.events.remove(event)
                return f"cancelled {event_id}"
        raise WorkplaceError(f"no event with id {event_id}")

    def send_email(self, to: str, subject: str, body: str = "") -> str:
        if to not in {p["email"] for p in self.people}:
            raise WorkplaceError(f"unknown address {to!r}")
        self.outbox.append({"to": to, "subject": str(subject), "body": str(body)})
        return "sent"


def _date(rng: random.Random) -> str:
    return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _check_date(date: object) -> None:
    if not isinstance(date, str) or not DATE.match(date):
        raise WorkplaceError(f"date must be YYYY-MM-DD, got {date!r}")


# ------------------------------------------------------------------ tasks --------------------


def workplace_task(seed: int) -> dict[str, Any]:
    """A task row: its prompt, and `workplace` = {"seed", "goal"} (the world and the goal)."""
    rng = random.Random(f"task:{seed}")
    world = World.from_seed(seed)
    person = rng.choice(world.people)
    kind = rng.choice(GOALS)
    if kind == "schedule":
        goal = {
            "kind": kind,
            "title": rng.choice(TITLES),
            "date": _date(rng),
            "email": person["email"],
        }
        prompt = (
            f"Schedule a meeting called '{goal['title']}' on {goal['date']} with {person['name']}."
        )
    elif kind == "email":
        goal = {"kind": kind, "subject": rng.choice(SUBJECTS), "email": person["email"]}
        prompt = f"Email {person['name']} with the subject '{goal['subject']}'."
    elif kind == "cancel":
        event = rng.choice(world.events)
        goal = {"kind": kind, "title": event["title"], "date": event["date"]}
        prompt = f"Cancel the '{event['title']}' meeting on {event['date']}."
    else:
        goal = {"kind": kind, "email": person["email"]}
        prompt = f"What is {person['name']}'s email address? Answer with the address alone."
    return {
        "uid": f"workplace:{seed}",
        "prompt": prompt,
        "workplace": json.dumps({"seed": seed, "goal": goal}),
    }


def solved_world(spec: dict[str, Any]) -> World:
    """The world after the goal's known solution."""
    world = World.from_seed(spec["seed"])
    goal = spec["goal"]
    if goal["kind"] == "schedule":
        world.create_event(goal["title"], goal["date"], [goal["email"]])
    elif goal["kind"] == "email":
        world.send_email(goal["email"], goal["subject"])
    elif goal["kind"] == "cancel":
        event = next(
            e for e in world.events if (e["title"], e["date"]) == (goal["title"], goal["date"])
        )
        world.cancel_event(event["id"])
    return world


def replayed_world(spec: dict[str, Any], turns: Sequence[dict[str, Any]]) -> World:
    """The world after the episode's calls, replayed in order (refused calls change nothing)."""
    world = World.from_seed(spec["seed"])
    for turn in turns:
        calls = (turn.get("tool_calls") or ()) if turn.get("role") == "assistant" else ()
        for raw in calls:
            call = raw.get("function", raw) if isinstance(raw, dict) else {}
            arguments = call.get("arguments", {})
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    continue
            with contextlib.suppress(WorkplaceError):
                world.call(call.get("name", ""), arguments if isinstance(arguments, dict) else {})
    return world


def verify_workplace(completion: object, reference: object) -> Verdict:
    """Pass iff the replayed world equals the solved one (and a question's answer holds the
    value). `completion`: the episode's turns after its opening (TRL's conversational form),
    or its text (no calls); `reference`: the row's `workplace` JSON."""
    try:
        spec = json.loads(reference) if isinstance(reference, str) else dict(reference)  # type: ignore[arg-type]
        if not isinstance(spec["seed"], int) or spec["goal"]["kind"] not in GOALS:
            raise ValueError
    except (TypeError, ValueError, KeyError):
        return Verdict(None, 0.0, "workplace reference is not {seed, goal} JSON", "reference")
    turns = (
        completion
        if isinstance(completion, list)
        else [{"role": "assistant", "content": str(completion)}]
    )
    got, want = replayed_world(spec, turns).state(), solved_world(spec).state()
    if got != want:
        missing = [x for k in want for x in want[k] if x not in got[k]]
        extra = [x for k in got for x in got[k] if x not in want[k]]
        return Verdict(False, 0.0, f"state differs: missing {missing}, unexpected {extra}")
    if spec["goal"]["kind"] == "lookup":
        final = next(
            (t.get("content", "") for t in reversed(turns) if t.get("role") == "assistant"), ""
        )
        if spec["goal"]["email"] not in final:
            return Verdict(False, 0.0, "the answer does not give the address")
    return Verdict(True, 1.0, "state and answer match the goal")


def workplace_reward(
    prompts: Sequence[Any], completions: Sequence[Any], workplace: Sequence[Any], **_: Any
) -> list[float | None]:
    """TRL-style reward: 1 when the episode reached its goal's state, else 0."""
    return [verify_workplace(c, w).reward() for c, w in zip(completions, workplace, strict=True)]
