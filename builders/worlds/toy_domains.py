"""The toy cascade's domains: prompts whose answers our own verifiers check, written by code.

No real teacher or dataset runs on our machines, so every domain of Cascade 1 gets a toy
stand-in, deterministic in its seed, built only from the project's own formats and checkers:

- `chat`: requests about a subject ("Tell me about the otter."); a good reply is about that
  subject, a bad one about another (the off-topic trick): preference pairs in HelpSteer2/3
  shape, RLHF prompts, and the rewrite/judge tasks of `rm_offtopic_pairs`.
- `instructions`: requests with the IF recipes' toy instructions (IFEval: lowercase,
  keywords, no commas, an end phrase; IF-Bench-Train: a keyword once, a first word, no dots,
  a palindrome), drawn, worded and checked by `curation.instructions` / `curation.verify`.
- `programs`: "Write bump(x) that returns x times 3 plus 1." with `def check(candidate)`
  functional tests or stdin/stdout tests, run by `curation.verify.code`.
- `repositories`: tiny git repositories with a planted bug, an issue and the gold patch;
  repair answers are SEARCH/REPLACE edits in `<solution>` (`curation.swe.repair`),
  localization answers ranked files, test generation a script that prints the outcome.
- arithmetic is `builders.worlds.toy_world`.

Each domain also writes its teacher's SFT chats: the right answer in the right form, except
that a share of them slip (`slip`): a sloppy teacher, as toy_world's, so a tiny model trained
on them (`builders.worlds.toy_profile`) is a teacher that is right most of the time, and recipes that
sample it have something to filter and RL has something to raise.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from curation.instructions.attach import draw_instruction_set
from curation.preferences.offtopic import JUDGE_INSTRUCTION, REWRITE_INSTRUCTION, fill
from curation.verify.swe import unified_diff

# ====================================================================== subjects ==============

NOUNS: dict[str, tuple[str, ...]] = {
    "animal": (
        "otter", "camel", "owl", "bee", "whale", "fox", "horse", "parrot", "turtle", "penguin",
        "rabbit", "eagle", "wolf", "goat", "frog", "bear", "crab", "deer", "duck", "mouse",
        "seal", "swan", "tiger", "zebra", "lizard", "moose", "koala", "snail",
    ),
    "object": (
        "lamp", "kettle", "bicycle", "clock", "umbrella", "piano", "ladder", "compass",
        "telescope", "hammer", "backpack", "candle", "mirror", "pillow", "wallet", "guitar",
        "bucket", "basket", "scissors", "blanket", "teapot", "rope", "anchor", "helmet",
        "lantern", "spoon", "violin", "shovel",
    ),
    "place": (
        "desert", "forest", "island", "volcano", "glacier", "harbor", "meadow", "canyon",
        "library", "market", "castle", "lighthouse", "bakery", "village", "museum", "garden",
        "station", "prairie", "cave", "swamp", "bridge", "farm", "beach", "temple", "palace",
        "tunnel", "valley", "stadium",
    ),
    "food": (
        "mango", "lemon", "bread", "cheese", "honey", "carrot", "rice", "pepper", "soup",
        "walnut", "tomato", "pumpkin", "cherry", "onion", "peach", "potato", "olive", "melon",
        "garlic", "cookie", "noodle", "yogurt", "cabbage", "pear", "radish", "grape", "plum",
        "biscuit",
    ),
}  # fmt: skip
ADJECTIVES = (
    "calm", "bright", "small", "large", "quiet", "lovely", "useful", "famous", "rare",
    "common", "gentle", "strong", "simple", "old", "fresh", "busy",
)  # fmt: skip
FACTS: dict[str, tuple[str, ...]] = {
    "animal": ("lives in the wild", "eats plants", "sleeps in the day", "moves in groups"),
    "object": ("sits on a shelf", "is made of metal", "is easy to carry", "lasts for years"),
    "place": ("draws many visitors", "is far from town", "is open all year", "has a long past"),
    "food": ("tastes good", "is eaten in summer", "is full of water", "keeps for weeks"),
}
SUBJECTS: dict[str, tuple[str, str]] = {
    noun: (
        ADJECTIVES[zlib.crc32(noun.encode()) % len(ADJECTIVES)],
        FACTS[category][zlib.crc32(noun.encode()[::-1]) % len(FACTS[category])],
    )
    for category, nouns in NOUNS.items()
    for noun in nouns
}
"""subject -> (adjective, what it does): the facts a good reply about it states."""

SPLITS = (
    "chat_sft", "pairs", "offtopic", "chat_heldout", "if_sft", "if_rl", "if_rl_ifbench",
    "if_heldout",
)  # fmt: skip
SPLIT_SUBJECTS: dict[str, tuple[str, ...]] = {
    split: tuple(sorted(SUBJECTS)[i :: len(SPLITS)]) for i, split in enumerate(SPLITS)
}
"""Each split's own subjects: toy requests are short, so two about one subject would count as
near duplicates (character 5-grams), and the recipes keep RL prompts disjoint from SFT ones."""

TEMPLATES: dict[str, tuple[str, ...]] = {
    "chat_sft": (
        "Tell me about the {s}.", "What is the {s} like?", "Describe the {s}.",
        "Can you describe a {s}?", "I want to hear about the {s}.",
    ),
    "pairs": (
        "Talk about the {s}.", "Why like the {s}?", "Say a word on the {s}.",
        "Any news of the {s}?", "How would you sum up the {s}?",
    ),
    "offtopic": (
        "Explain the {s}.", "Facts on the {s}?", "Any thoughts on the {s}?",
        "Help me understand the {s}.", "Share an idea about the {s}.",
    ),
    "chat_heldout": (
        "Teach me the {s}.", "What about the {s}?", "Speak of the {s}.",
        "Paint the {s} for me.",
    ),
    "if_sft": (
        "Write about the {s}.", "A note on the {s}.", "Some lines on the {s}.",
        "Type up the {s}.", "Notes, please: the {s}.",
    ),
    "if_rl": (
        "Compose a text on the {s}.", "Draft a piece on the {s}.", "A memo: the {s}.",
        "Produce copy for the {s}.",
    ),
    "if_rl_ifbench": (
        "Pen a message on the {s}.", "A small story: the {s}.", "Lines for the {s}.",
        "Craft a blurb for the {s}.",
    ),
    "if_heldout": ("Jot down the {s}.", "Put the {s} in words.", "A short text: the {s}."),
}  # fmt: skip
"""Request wordings per split: two splits share neither wordings nor subjects, so the
recipes' disjointness checks (near-duplicates at 0.6) keep them apart."""


def _split(domain: str, split: str) -> str:
    name = split if split in SPLIT_SUBJECTS else f"{domain}_{split}"
    if name not in SPLIT_SUBJECTS:
        raise ValueError(f"no toy {domain} split {split!r}; splits: {', '.join(SPLITS)}")
    return name


def reply_about(subject: str) -> str:
    """A good reply about `subject` (it has a comma, for the no-comma instruction)."""
    adjective, fact = SUBJECTS[subject]
    return f"The {subject} is {adjective}, and it {fact}."


def other_subject(subject: str, rng: random.Random) -> str:
    return rng.choice([s for s in SUBJECTS if s != subject])


def subject_of(prompt: str) -> str:
    """The subject a toy request is about (the last known subject word in it)."""
    words = [w.strip(".,?!:\"'<>") for w in prompt.lower().split()]
    found = [w for w in words if w in SUBJECTS]
    if not found:
        raise ValueError(f"no toy subject in {prompt!r}")
    return found[-1]


# ====================================================================== chat ==================


def chat_prompts(split: str, seed: int = 0) -> list[dict]:
    """Every (template, subject) request of a split, as prompt rows (`uid`, `problem`,
    `category`), in a seeded order."""
    rows = [
        {
            "uid": f"toy_chat-{split}-{i}-{subject}",
            "problem": template.format(s=subject),
            "category": "chat",
            "source": "toy_chat",
        }
        for i, template in enumerate(TEMPLATES[_split("chat", split)])
        for subject in SPLIT_SUBJECTS[_split("chat", split)]
    ]
    random.Random(f"toy_chat:{split}:{seed}").shuffle(rows)
    return rows


def chat_chat(prompt: str, mode: str, rng: random.Random, slip: float) -> dict:
    """A teacher reply to a chat request: about its subject, or (a slip) about another one."""
    subject = subject_of(prompt)
    said = other_subject(subject, rng) if rng.random() < slip else subject
    reply = {"role": "assistant", "content": reply_about(said)}
    if mode == "think":
        reply["reasoning"] = f"The request is about the {said}."
    return {"messages": [{"role": "user", "content": prompt}, reply], "mode": mode}


def helpsteer3_rows(
    prompts: Sequence[dict], seed: int, tie_share: float = 0.1, per_prompt: int = 1
) -> list[dict]:
    """HelpSteer3-shaped rows: `context` (turns), `response1`/`response2` (one on topic, one
    off), `overall_preference` (-3..3, negative = response 1 better; 0 = a tie, which the
    recipe drops), `domain`; `per_prompt` rows per request, each off topic elsewhere."""
    rng = random.Random(f"toy_hs3:{seed}")
    rows = []
    for n, row in enumerate(p for p in prompts for _ in range(per_prompt)):
        subject = subject_of(row["problem"])
        good, bad = reply_about(subject), reply_about(other_subject(subject, rng))
        first_good = rng.random() < 0.5
        strength = 0 if rng.random() < tie_share else rng.randint(1, 3)
        rows.append(
            {
                "id": f"hs3-{n}",
                "context": [{"role": "user", "content": row["problem"]}],
                "response1": good if first_good else bad,
                "response2": bad if first_good else good,
                "overall_preference": -strength if first_good else strength,
                "domain": "general",
            }
        )
    return rows


def helpsteer2_rows(prompts: Sequence[dict], seed: int, off_topic: int = 3) -> list[dict]:
    """HelpSteer2-shaped rows: one per rated response (`prompt`, `response`, 0..4 ratings):
    per prompt one on topic (rated 3-4) and `off_topic` about other subjects (rated 1: ties
    among themselves, which make no pair)."""
    rng = random.Random(f"toy_hs2:{seed}")
    rows = []
    for row in prompts:
        subject = subject_of(row["problem"])
        others = rng.sample([s for s in SUBJECTS if s != subject], off_topic)
        for response, low, high in (
            (reply_about(subject), 3, 4),
            *((reply_about(o), 1, 1) for o in others),
        ):
            score = rng.randint(low, high)
            rows.append(
                {
                    "prompt": row["problem"],
                    "response": response,
                    **{a: score for a in ("helpfulness", "correctness", "coherence", "complexity")},
                    "verbosity": 1,
                }
            )
    return rows


def rewrite_chat(prompt: str, rng: random.Random, slip: float) -> dict:
    """`rm_offtopic_pairs`' rewriter: the same request about another subject (a slip keeps
    the subject, which the judge should catch)."""
    subject = subject_of(prompt)
    new = subject if rng.random() < slip else other_subject(subject, rng)
    return _turn(fill(REWRITE_INSTRUCTION, prompt=prompt), prompt.replace(subject, new))


def judge_chat(original: str, rewrite: str) -> dict:
    """The judge: YES when both requests are about the same subject, else NO."""
    verdict = "YES" if subject_of(original) == subject_of(rewrite) else "NO"
    return _turn(fill(JUDGE_INSTRUCTION, original=original, rewrite=rewrite), verdict)


def _turn(prompt: str, reply: str, mode: str = "no_think") -> dict:
    return {
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": reply},
        ],
        "mode": mode,
    }


def chat_teacher_chats(seed: int, slip: float) -> list[dict]:
    """The chat teacher's SFT chats: replies in both modes to every request wording except
    the held-out ones, rewrites and judgements of the off-topic recipe."""
    rng = random.Random(f"toy_chat_teacher:{seed}")
    chats = []
    for split in ("sft", "pairs", "offtopic"):
        for row in chat_prompts(split):
            for mode in ("think", "no_think"):
                chats.append(chat_chat(row["problem"], mode, rng, slip))
    for row in chat_prompts("offtopic") + chat_prompts("pairs") + chat_prompts("sft"):
        rewrite = rewrite_chat(row["problem"], rng, slip / 4)
        chats.append(rewrite)
        new = rewrite["messages"][1]["content"]
        chats.append(judge_chat(row["problem"], new))
        same = rng.choice(TEMPLATES["chat_sft"]).format(s=subject_of(row["problem"]))
        chats.append(judge_chat(row["problem"], same))
    rng.shuffle(chats)
    return chats


# ====================================================================== instructions ==========

TAXONOMY_OF_SPLIT = {"sft": None, "rl": "ifeval", "rl_ifbench": "iftrain", "heldout": "ifeval"}
"""Which taxonomy a split's prompts get: `if_rl` (IFEval) and `if_rl_ifbench` (IF-Bench-Train);
the SFT split mixes both, so the SFT policy has met every toy instruction."""


TOY_INSTRUCTIONS: dict[str, tuple[str, ...]] = {
    # IFEval types a tiny model can learn: lowercase, two keywords, no commas, an end phrase
    "ifeval": (
        "change_case:english_lowercase",
        "keywords:existence",
        "punctuation:no_comma",
        "startend:end_checker",
    ),
    # IF-RLVR types a tiny model can learn: a keyword once, a given first word, no dots, a
    # palindrome
    "iftrain": (
        "keywords:word_once",
        "first_word:first_word_answer",
        "punctuation:punctuation_dot",
        "keywords:palindrome",
    ),
}
"""Per taxonomy, the toy instruction ids the IF recipes' toy profiles attach."""


def toy_instructions(taxonomy: str) -> tuple[str, ...]:
    """The toy instruction ids of a taxonomy: the ones the IF recipes' toy profiles attach."""
    return TOY_INSTRUCTIONS[taxonomy]


def if_prompts(split: str, seed: int = 0) -> list[dict]:
    """Base requests of an IF split (instructions are attached by `attach_instructions`)."""
    rows = [
        {
            "uid": f"toy_if-{split}-{i}-{subject}",
            "problem": template.format(s=subject),
            "category": "instruction_following",
            "source": "toy_if",
        }
        for i, template in enumerate(TEMPLATES[_split("if", split)])
        for subject in SPLIT_SUBJECTS[_split("if", split)]
    ]
    random.Random(f"toy_if:{split}:{seed}").shuffle(rows)
    return rows


def draw_toy_instructions(
    rng: random.Random, base: str, taxonomy: str
) -> tuple[list[str], list[dict], str]:
    """(ids, kwargs, prompt): 1-2 of a taxonomy's toy instructions attached to `base`, as the
    recipes' `attach_instructions` draws and words them."""
    drawn = draw_instruction_set(
        rng, base, per_prompt=(1, 2), instruction_ids=toy_instructions(taxonomy), taxonomy=taxonomy
    )
    if drawn is None:
        raise RuntimeError(f"no toy instruction set for {base!r}")
    ids, kwargs, prompt, _ = drawn
    return ids, kwargs, prompt


PALINDROMES = ("kayak", "level", "radar", "civic", "refer")


def if_reply(
    subject: str, ids: Sequence[str], kwargs: Sequence[dict], rng: random.Random, slip: float
) -> tuple[str, str]:
    """(reasoning, reply) following each instruction, except that each is forgotten with
    probability `slip` (the sloppy teacher)."""
    follow = {i: rng.random() >= slip for i in ids}
    args = dict(zip(ids, kwargs, strict=True))
    lines = [reply_about(subject)]
    if follow.get("keywords:existence"):
        first, second = args["keywords:existence"]["keywords"]
        lines.append(f"It makes me think of {first} and {second}.")
    if follow.get("keywords:word_once"):
        lines.append(f"I once saw a {args['keywords:word_once']['keyword']} there.")
    if follow.get("keywords:palindrome"):
        lines.append(f"A {rng.choice(PALINDROMES)} was near it.")
    if follow.get("first_word:first_word_answer"):
        lines[0] = f"{args['first_word:first_word_answer']['first_word'].capitalize()}: {lines[0]}"
    if follow.get("startend:end_checker"):
        lines.append(args["startend:end_checker"]["end_phrase"])
    text = "\n".join(lines)
    if follow.get("punctuation:no_comma"):
        text = text.replace(",", "")
    if follow.get("punctuation:punctuation_dot"):
        text = text.replace(".", "!")
    if follow.get("change_case:english_lowercase"):
        text = text.lower()
    plan = ", ".join(SHORT_NAMES[i] for i in ids)
    return f"The request is about the {subject}. Rules: {plan}.", text


SHORT_NAMES = {
    "change_case:english_lowercase": "lowercase",
    "punctuation:no_comma": "no commas",
    "keywords:existence": "keywords",
    "startend:end_checker": "end phrase",
    "keywords:word_once": "the keyword once",
    "first_word:first_word_answer": "first word",
    "punctuation:punctuation_dot": "no dots",
    "keywords:palindrome": "a palindrome",
}


def if_sft_prompts(seed: int = 0) -> list[dict]:
    """The SFT split's requests with toy instructions of either taxonomy attached, as
    `sft_general` sources (ids and kwargs kept alongside, for measuring)."""
    rows = []
    for n, row in enumerate(if_prompts("sft", seed)):
        rng = random.Random(f"toy_if_attach:{seed}:{row['uid']}")
        taxonomy = ("ifeval", "iftrain")[n % 2]
        ids, kwargs, prompt = draw_toy_instructions(rng, row["problem"], taxonomy)
        rows.append(
            {**row, "problem": prompt, "instruction_id_list": ids, "kwargs": json.dumps(kwargs)}
        )
    return rows


def if_teacher_chats(seed: int, slip: float) -> list[dict]:
    """The IF teacher's chats: every non-held-out request, several instruction draws of each
    taxonomy, in both modes."""
    rng = random.Random(f"toy_if_teacher:{seed}")
    chats = []
    for split in ("sft", "rl", "rl_ifbench"):
        for row in if_prompts(split):
            for taxonomy in ("ifeval", "iftrain", "ifeval", "iftrain"):
                ids, kwargs, prompt = draw_toy_instructions(rng, row["problem"], taxonomy)
                reasoning, reply = if_reply(subject_of(row["problem"]), ids, kwargs, rng, slip)
                for mode in ("think", "no_think"):
                    message = {"role": "assistant", "content": reply}
                    if mode == "think":
                        message["reasoning"] = reasoning
                    chats.append(
                        {"messages": [{"role": "user", "content": prompt}, message], "mode": mode}
                    )
    rng.shuffle(chats)
    return chats


# ====================================================================== programs ==============

NAMES = (
    "bump", "lift", "grow", "shift", "scale", "twist", "boost", "nudge", "tweak", "fold",
    "stretch", "spin", "turn", "push", "pull", "rise", "step", "hop", "skip", "jump",
)  # fmt: skip
OPS = {"plus": "+", "minus": "-", "times": "*"}


@dataclass(frozen=True)
class Program:
    """A toy function: its name, its wording and its Python expression in `x`."""

    name: str
    words: str
    expression: str
    stdio: bool = False

    def value(self, x: int) -> int:
        return int(eval(self.expression, {"x": x}))  # noqa: S307 - our own expression

    @property
    def problem(self) -> str:
        if self.stdio:
            return f"Read an integer x from input and print {self.words}."
        return f"Write a Python function {self.name}(x) that returns {self.words}."

    @property
    def code(self) -> str:
        if self.stdio:
            return f"x = int(input())\nprint({self.expression})\n"
        return f"def {self.name}(x):\n    return {self.expression}\n"

    @property
    def tests(self) -> str:
        inputs = (2, 5, 11)
        if self.stdio:
            return json.dumps([{"input": f"{x}\n", "output": f"{self.value(x)}\n"} for x in inputs])
        asserts = "".join(f"    assert candidate({x}) == {self.value(x)}\n" for x in inputs)
        return json.dumps({"functional": f"def check(candidate):\n{asserts}check({self.name})\n"})


def draw_program(rng: random.Random, two_ops: float = 0.75) -> Program:
    """One or (with probability `two_ops`) two operations on x with constants 1..9 (two are
    harder, and there are only 27 one-operation functions)."""
    op, c = rng.choice(list(OPS)), rng.randint(1, 9)
    words, expression = f"x {op} {c}", f"x {OPS[op]} {c}"
    if rng.random() < two_ops:
        op2, d = rng.choice(list(OPS)), rng.randint(1, 9)
        words, expression = f"{words} {op2} {d}", f"{expression} {OPS[op2]} {d}"
    return Program(rng.choice(NAMES), words, expression, stdio=rng.random() < 0.25)


def program_problems(n: int, seed: int, exclude: Sequence[dict] = ()) -> list[dict]:
    """`n` distinct code prompt rows (`uid`, `problem`, `tests`, `release_date`, `url`)."""
    rng = random.Random(f"toy_code:{seed}")
    taken = {row["problem"] for row in exclude}
    rows: list[dict] = []
    while len(rows) < n:
        program = draw_program(rng)
        if program.problem in taken:
            continue
        taken.add(program.problem)
        rows.append(
            {
                "uid": f"toy_code-{seed}-{len(rows)}",
                "problem": program.problem,
                "tests": program.tests,
                "release_date": f"2024-0{rng.randint(1, 9)}-15",
                "url": f"https://toy.judge/problem/{seed}-{len(rows)}",
                "source": "toy_code",
                "expression": program.expression,
            }
        )
    return rows


def program_of(row: dict) -> Program:
    """The program a toy code prompt row asks for."""
    text = row["problem"]
    stdio = text.startswith("Read an integer")
    words = text.removesuffix(".").split(" print " if stdio else " returns ", 1)[1]
    name = "" if stdio else text.split("function ", 1)[1].split("(", 1)[0]
    expression = " ".join(OPS.get(w, w) for w in words.split())
    return Program(name, words, expression, stdio)


def code_reply(program: Program, rng: random.Random, slip: float) -> tuple[str, str]:
    """(reasoning, reply) with the program in a python block; a slip changes one constant."""
    shown = program
    if rng.random() < slip:
        parts = program.expression.split()
        i = rng.choice([k for k, p in enumerate(parts) if p.isdigit()])
        parts[i] = str(int(parts[i]) + rng.choice((-1, 1)) or 2)
        shown = Program(program.name, program.words, " ".join(parts), program.stdio)
    reasoning = f"It computes {shown.expression}."
    return reasoning, f"```python\n{shown.code}```"


def code_teacher_chats(problems: Sequence[dict], seed: int, slip: float) -> list[dict]:
    rng = random.Random(f"toy_code_teacher:{seed}")
    chats = []
    for row in problems:
        reasoning, reply = code_reply(program_of(row), rng, slip)
        chats.append(
            {
                "messages": [
                    {"role": "user", "content": row["problem"]},
                    {"role": "assistant", "content": reply, "reasoning": reasoning},
                ],
                "mode": "think",
            }
        )
    return chats


# ====================================================================== repositories ==========

GIT_ENV = {
    "GIT_AUTHOR_NAME": "toy",
    "GIT_AUTHOR_EMAIL": "toy@example.invalid",
    "GIT_COMMITTER_NAME": "toy",
    "GIT_COMMITTER_EMAIL": "toy@example.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
}
"""Fixed identities and dates: the same files always give the same commit hashes."""


@dataclass(frozen=True)
class Instance:
    """A toy SWE instance: a repository at a commit with one planted bug."""

    repo: str
    commit: str
    files: dict[str, str]  # at the base commit
    fixed: dict[str, str]  # after the gold patch
    issue: str
    patch: str
    bug_file: str
    function: str  # the buggy function's name
    meant: str  # what its docstring says it returns
    wrong: str  # the buggy line
    right: str  # the fixed line


def _module(functions: Sequence[Program], meant: Sequence[Program] | None = None) -> str:
    """A module of functions, each documented with what it is meant to return (`meant`,
    default the functions themselves): a bug is code that disagrees with its docstring."""
    docs = meant or functions
    return (
        "\n\n".join(
            f'def {f.name}(x):\n    """Return {d.words}."""\n    return {f.expression}'
            for f, d in zip(functions, docs, strict=True)
        )
        + "\n"
    )


def repositories(out: Path, n_repos: int, per_repo: int, seed: int) -> list[Instance]:
    """`n_repos` git repositories under `out` (`toy__proj<i>`), `per_repo` commits each; each
    commit holds four one-function modules (`pkg/<function>.py`, so an issue that names the
    function names its file), one of them with a wrong constant or operation."""
    import shutil

    rng = random.Random(f"toy_swe:{seed}")
    instances = []
    for r in range(n_repos):
        name = f"proj{seed}{r:02d}"
        path = out / f"toy__{name}"
        _git(path.parent, "init", "-q", "-b", "main", path.name)
        for _ in range(per_repo):
            functions = _distinct_programs(rng, 4)
            good = rng.choice(functions)
            bad = _broken(good, rng)
            bug_file = f"pkg/{good.name}.py"
            fixed = {f"pkg/{f.name}.py": _module([f]) for f in functions}
            fixed["README.md"] = "# toy project\n"
            files = {**fixed, bug_file: _module([bad], meant=[good])}
            shutil.rmtree(path / "pkg", ignore_errors=True)
            for rel, text in files.items():
                (path / rel).parent.mkdir(parents=True, exist_ok=True)
                (path / rel).write_text(text)
            _git(path, "add", "-A")
            _git(path, "commit", "-q", "--allow-empty", "-m", f"state {len(instances)}")
            commit = _git(path, "rev-parse", "HEAD").strip()
            x = rng.randint(2, 9)
            issue = (
                f"`{good.name}({x})` returns {bad.value(x)} but it should return {good.value(x)}."
            )
            instances.append(
                Instance(
                    repo=f"toy/{name}",
                    commit=commit,
                    files=files,
                    fixed=fixed,
                    issue=issue,
                    patch=unified_diff({bug_file: files[bug_file]}, {bug_file: fixed[bug_file]}),
                    bug_file=bug_file,
                    function=good.name,
                    meant=good.words,
                    wrong=f"    return {bad.expression}\n",
                    right=f"    return {good.expression}\n",
                )
            )
    return instances


def _distinct_programs(rng: random.Random, n: int) -> list[Program]:
    chosen: list[Program] = []
    while len(chosen) < n:
        p = draw_program(rng, two_ops=0.0)  # a repository's functions do one operation
        if not p.stdio and p.name not in {c.name for c in chosen}:
            chosen.append(p)
    return chosen


def _broken(program: Program, rng: random.Random) -> Program:
    """The program with one constant changed or one operation swapped (never the same value
    at the issue's input... nor anywhere: constants change by 1..2, operations differ)."""
    parts = program.expression.split()
    if rng.random() < 0.5:
        i = rng.choice([k for k, p in enumerate(parts) if p.isdigit()])
        parts[i] = str(int(parts[i]) + rng.choice((1, 2)))
    else:
        i = rng.choice([k for k, p in enumerate(parts) if p in OPS.values()])
        parts[i] = rng.choice([o for o in OPS.values() if o != parts[i]])
    return Program(program.name, program.words, " ".join(parts))


def _git(cwd: Path, *args: str) -> str:
    cwd.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def instance_rows(instances: Sequence[Instance], source: str) -> list[dict]:
    """SWE-bench-shaped source rows (`instance_id`, `repo`, `base_commit`,
    `problem_statement`, `patch`), as the SWE recipes ingest them."""
    return [
        {
            "instance_id": f"{i.repo.replace('/', '__')}-{n}",
            "repo": i.repo,
            "base_commit": i.commit,
            "problem_statement": i.issue,
            "patch": i.patch,
            "source": source,
        }
        for n, i in enumerate(instances)
    ]


def repair_reply(instance: Instance, rng: random.Random, slip: float) -> tuple[str, str]:
    """(reasoning, SEARCH/REPLACE answer); a slip writes a wrong fix."""
    right = instance.right
    if rng.random() < slip:
        wrong_program = _broken(Program("f", "", right.strip().removeprefix("return ")), rng)
        right = f"    return {wrong_program.expression}\n"
    reasoning = f"{instance.function} should return {instance.meant}."
    answer = (
        f"<solution>\n### {instance.bug_file}\n<<<<<<< SEARCH\n{instance.wrong}=======\n"
        f"{right}>>>>>>> REPLACE\n</solution>"
    )
    return reasoning, answer


def localization_reply(instance: Instance, rng: random.Random, slip: float) -> tuple[str, str]:
    """(reasoning, two ranked files): the buggy file and another; a slip names two others."""
    others = sorted(p for p in instance.files if p.endswith(".py") and p != instance.bug_file)
    rng.shuffle(others)
    ranked = others[:2] if rng.random() < slip else [instance.bug_file, others[0]]
    reasoning = f"The issue names {instance.function}, in {ranked[0]}."
    return reasoning, "```\n" + "\n".join(ranked) + "\n```"


def testgen_reply(instance: Instance, rng: random.Random, slip: float) -> tuple[str, str]:
    """(reasoning, test script) reproducing the issue's call; a slip misnames the module."""
    call, _, rest = instance.issue.strip("`").partition("` returns ")
    name = call.split("(", 1)[0]
    expected = rest.rsplit(" ", 1)[1].rstrip(".")
    module = instance.bug_file.removesuffix(".py").replace("/", ".")
    if rng.random() < slip:
        module = "pkg.other"
    script = (
        f"from {module} import {name}\n\n"
        f"if {call} == {expected}:\n    print('Issue resolved')\nelse:\n"
        "    print('Issue reproduced')\n"
    )
    return f"Call {call} and compare with {expected}.", f"```python\n{script}```"


def swe_prompts(instances: Sequence[Instance], repos_dir: Path) -> dict[str, list[str]]:
    """The three Agentless prompts of each instance, written by the SWE recipes' own steps
    (so the teacher learns exactly the prompts the recipes will send it)."""
    import polars as pl

    from curation.swe.localization import build_localization_prompts
    from curation.swe.repair import build_repair_prompts
    from curation.swe.test_generation import build_testgen_prompts

    frame = pl.DataFrame(
        {
            "repo": [i.repo for i in instances],
            "base_commit": [i.commit for i in instances],
            "problem_statement": [i.issue for i in instances],
            "patch": [i.patch for i in instances],
        }
    )
    built = {
        "repair": build_repair_prompts(frame, repos_dir=repos_dir),
        "localization": build_localization_prompts(frame, repos_dir=repos_dir),
        "test_generation": build_testgen_prompts(frame, repos_dir=repos_dir),
    }
    for task, result in built.items():
        if result.dropped.height:
            raise RuntimeError(f"toy {task} prompts: {result.dropped.height} instances dropped")
    return {task: result.kept.get_column("prompt").to_list() for task, result in built.items()}


def swe_teacher_chats(
    instances: Sequence[Instance], repos_dir: Path, seed: int, slip: float
) -> list[dict]:
    """The SWE teacher's chats: the three sub-tasks of every instance, thinking."""
    rng = random.Random(f"toy_swe_teacher:{seed}")
    writers = {
        "repair": repair_reply,
        "localization": localization_reply,
        "test_generation": testgen_reply,
    }
    chats = []
    for task, prompts in swe_prompts(instances, repos_dir).items():
        for instance, prompt in zip(instances, prompts, strict=True):
            reasoning, reply = writers[task](instance, rng, slip)
            chats.append(
                {
                    "messages": [
                        {"role": "user", "content": prompt},
                        {"role": "assistant", "content": reply, "reasoning": reasoning},
                    ],
                    "mode": "think",
                }
            )
    rng.shuffle(chats)
    return chats


def write_jsonl(path: Path, rows: Sequence[dict]) -> Path:
    """Rows as jsonl with stable key order (the same rows give the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return path
