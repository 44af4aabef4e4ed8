"""The project's own demo corpus: small math RL prompts with known, planted cases.

`write_demo_corpus(dir)` writes, byte-identically on every run for a given seed:

- `dir/sources/demo_math.jsonl`: the corpus, one prompt per line with fields
  `id` ("demo-0001", ...), `problem`, `answer` (null or "" for `missing_answer` rows),
  `demo_case` (the planted label), `demo_of` (for copies: the `id` of the corpus row or
  benchmark item copied; else null) and `demo_edit` (how a copy was changed; else null).
- `dir/benchmarks/demo_bench.jsonl`: a small math test set of 32 items, fields `id`
  ("bench-01" ... "bench-32"), `problem`, `answer`, that the corpus is decontaminated
  against; 26 items are copied into the corpus, no two items share a word 9-gram.

Labels (`demo_case`) and what a curation recipe must do with them:

| label | rows | expected |
|---|---|---|
| `clean` | 400 | kept: varied templates, numbers *and* wording (pairwise char 5-gram Jaccard < 0.6) |
| `sibling` | 20 | kept: a clean row's template with other numbers and another answer (`demo_edit` "numbers") |
| `exact_dup` | 40 | dropped as duplicate of `demo_of` (byte-identical problem and answer) |
| `near_dup` | 60 | dropped as duplicate of `demo_of`; `demo_edit` is `respace_case` (identical after case/space normalization), `punctuation`, `word_swap`, `typo` or `prefix` |
| `contaminated_verbatim` / `_respaced` / `_prefixed` / `_embedded` / `_half` | 6/5/5/5/5 | dropped as contaminated by benchmark item `demo_of` (`demo_edit`: verbatim, respaced, prefixed, embedded, half) |
| `multiple_choice`, `proof`, `multi_question`, `figure_reference`, `non_english` | 20 each | dropped by the rule of that name |
| `missing_answer` | 15 | dropped by rule `missing_answer` (null, "" or blank answer) |
| `unparseable_answer` | 10 | dropped by rule `unparseable_answer` |

Every text is written or templated here (no shared data is copied). Originals come before
their copies in file order, so "keep the earliest row" keeps the original.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

SEED = 20251130
CLEAN_ROWS = 400
MAX_CLEAN_JACCARD = 0.6
CONTAMINATION_COUNTS = {
    "contaminated_verbatim": 6,
    "contaminated_respaced": 5,
    "contaminated_prefixed": 5,
    "contaminated_embedded": 5,
    "contaminated_half": 5,
}
DUPLICATE_COUNTS = {"exact_dup": 40, "near_dup": 60, "sibling": 20}
FILTER_CASES = (
    "multiple_choice",
    "proof",
    "multi_question",
    "figure_reference",
    "non_english",
    "missing_answer",
    "unparseable_answer",
)
DEMO_CASES = (
    "clean",
    "sibling",
    "exact_dup",
    "near_dup",
    *CONTAMINATION_COUNTS,
    *FILTER_CASES,
)
NEAR_DUP_EDITS = ("respace_case", "punctuation", "word_swap", "typo", "prefix")


@dataclass(frozen=True)
class DemoPaths:
    """Where `write_demo_corpus` put the corpus and its benchmark."""

    directory: Path
    sources: tuple[Path, ...]
    benchmark_dir: Path
    benchmark: Path


# -- word pools --------------------------------------------------------------------------

NAMES = (
    "Ada",
    "Bruno",
    "Chiara",
    "Dmitri",
    "Esther",
    "Farid",
    "Greta",
    "Hiro",
    "Ines",
    "Jonah",
    "Kemal",
    "Lena",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
    "Quinn",
    "Rosa",
    "Samir",
    "Tove",
    "Ulrich",
    "Vera",
    "Wendell",
    "Ximena",
    "Yusuf",
    "Zara",
    "Amos",
    "Beatriz",
    "Cyrus",
    "Dalia",
)
CONTAINERS = ("crate", "basket", "jar", "drawer", "tin", "bin", "box", "sack", "chest", "tray")
GOODS = (
    ("apples", "apple"),
    ("marbles", "marble"),
    ("pencils", "pencil"),
    ("buttons", "button"),
    ("stamps", "stamp"),
    ("shells", "shell"),
    ("tokens", "token"),
    ("beads", "bead"),
    ("cards", "card"),
    ("coins", "coin"),
    ("stickers", "sticker"),
    ("pebbles", "pebble"),
)
PLACES = ("garden", "courtyard", "parking lot", "classroom floor", "patio", "meadow", "stage")
VEHICLES = ("train", "ferry", "cyclist", "bus", "truck", "hiker", "courier", "drone")
WORDS = ("PRISM", "CLOUDY", "FABLE", "GRAVITY", "MOUNT", "PLANET", "QUICK", "BRAVEST")
ORDINAL_SUFFIX = {1: "st", 2: "nd", 3: "rd"}


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else ORDINAL_SUFFIX.get(n % 10, "th")
    return f"{n}{suffix}"


def _fraction(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


# -- clean templates ---------------------------------------------------------------------
# A template draws its numbers (and the answer) from `params`, then renders one of several
# setups and one of several asks. Different numbers, names, goods and wording per instance.


@dataclass(frozen=True)
class Template:
    key: str
    params: Callable[[random.Random], dict[str, object]]
    setups: tuple[str, ...]
    asks: tuple[str, ...]


def _p_arith(r: random.Random) -> dict[str, object]:
    a, d, n = r.randint(2, 40), r.randint(2, 13), r.randint(9, 60)
    return {"a": a, "d": d, "n": n, "nth": _ordinal(n), "answer": a + (n - 1) * d}


def _p_rect(r: random.Random) -> dict[str, object]:
    length, width = r.randint(8, 90), r.randint(3, 40)
    return {"l": length, "w": width, "place": r.choice(PLACES), "answer": length * width}


def _p_linear(r: random.Random) -> dict[str, object]:
    a, x, b = r.randint(2, 15), r.randint(-20, 40), r.randint(1, 70)
    return {"a": a, "b": b, "c": a * x + b, "answer": x}


def _p_discount(r: random.Random) -> dict[str, object]:
    price, pct = r.randrange(20, 400, 4), r.choice((10, 15, 20, 25, 30, 40, 50, 75))
    return {"price": price, "pct": pct, "answer": _fraction(Fraction(price * (100 - pct), 100))}


def _p_gcd(r: random.Random) -> dict[str, object]:
    g = r.randint(3, 30)
    a, b = g * r.randint(2, 25), g * r.randint(2, 25)
    return {"a": a, "b": b, "answer": math.gcd(a, b)}


def _p_lcm(r: random.Random) -> dict[str, object]:
    a, b = r.randint(4, 36), r.randint(4, 36)
    return {"a": a, "b": b, "answer": a * b // math.gcd(a, b)}


def _p_powmod(r: random.Random) -> dict[str, object]:
    a, k, m = r.randint(2, 19), r.randint(20, 400), r.randint(5, 13)
    return {"a": a, "k": k, "m": m, "answer": pow(a, k, m)}


def _p_divisors(r: random.Random) -> dict[str, object]:
    n = r.randint(60, 2000)
    return {"n": n, "answer": sum(1 for d in range(1, n + 1) if n % d == 0)}


def _p_marbles(r: random.Random) -> dict[str, object]:
    red, blue, green = r.randint(2, 20), r.randint(2, 20), r.randint(1, 15)
    return {
        "red": red,
        "blue": blue,
        "green": green,
        "answer": _fraction(Fraction(red, red + blue + green)),
    }


def _p_choose(r: random.Random) -> dict[str, object]:
    n, k = r.randint(7, 22), r.randint(2, 5)
    return {"n": n, "k": k, "answer": math.comb(n, k)}


def _p_word(r: random.Random) -> dict[str, object]:
    word = r.choice(WORDS)
    return {"word": word, "len": len(word), "answer": math.factorial(len(word))}


def _p_travel(r: random.Random) -> dict[str, object]:
    speed, hours = r.randint(12, 95), r.randint(2, 9)
    return {"v": speed, "d": speed * hours, "vehicle": r.choice(VEHICLES), "answer": hours}


def _p_mean(r: random.Random) -> dict[str, object]:
    scores = [r.randint(55, 100) for _ in range(4)]
    mean = r.randint(70, 95)
    fifth = 5 * mean - sum(scores)
    if not 0 <= fifth <= 100:
        return _p_mean(r)
    return {"s": ", ".join(map(str, scores)), "mean": mean, "answer": fifth}


def _p_hyp(r: random.Random) -> dict[str, object]:
    a, b, c = r.choice(((3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29)))
    k = r.randint(1, 9)
    return {"a": a * k, "b": b * k, "answer": c * k}


def _p_circle(r: random.Random) -> dict[str, object]:
    radius = r.randint(2, 30)
    return {"r": radius, "dia": 2 * radius, "answer": f"{radius * radius}\\pi"}


def _p_roots(r: random.Random) -> dict[str, object]:
    x1, x2 = r.randint(-12, 15), r.randint(-12, 15)
    s, p = x1 + x2, x1 * x2
    return {
        "poly": f"x^2 {'-' if s >= 0 else '+'} {abs(s)}x {'+' if p >= 0 else '-'} {abs(p)}",
        "answer": x1 * x1 + x2 * x2,
    }


def _p_pipes(r: random.Random) -> dict[str, object]:
    a, b = r.sample(range(2, 16), 2)
    return {"a": a, "b": b, "answer": _fraction(Fraction(a * b, a + b))}


def _p_interest(r: random.Random) -> dict[str, object]:
    principal, rate, years = r.randrange(500, 9000, 100), r.randint(2, 9), r.randint(2, 8)
    return {"P": principal, "rate": rate, "t": years, "answer": principal * rate * years // 100}


def _p_ages(r: random.Random) -> dict[str, object]:
    young, gap = r.randint(4, 30), r.randint(2, 35)
    return {"sum": 2 * young + gap, "gap": gap, "answer": young + gap}


def _p_powers(r: random.Random) -> dict[str, object]:
    a, b, c = r.randint(3, 14), r.randint(3, 14), r.randint(1, 6)
    return {"a": a, "b": b, "c": c, "answer": 2 ** (a + b - c)}


def _p_base(r: random.Random) -> dict[str, object]:
    n, base = r.randint(20, 250), r.choice((2, 3, 5, 7, 8))
    digits, m = "", n
    while m:
        digits, m = str(m % base) + digits, m // base
    return {"n": n, "base": base, "answer": digits}


def _p_digits(r: random.Random) -> dict[str, object]:
    n = r.randint(10_000, 9_999_999)
    return {"n": n, "answer": sum(int(c) for c in str(n))}


def _p_multiples(r: random.Random) -> dict[str, object]:
    k, top = r.randint(3, 19), r.randint(150, 2500)
    return {"k": k, "top": top, "answer": top // k}


def _p_angles(r: random.Random) -> dict[str, object]:
    a, b = r.randint(20, 100), r.randint(15, 60)
    return {"a": a, "b": b, "answer": 180 - a - b}


def _p_polygon(r: random.Random) -> dict[str, object]:
    n = r.randint(5, 30)
    return {"n": n, "answer": (n - 2) * 180}


def _p_coins(r: random.Random) -> dict[str, object]:
    nickels, dimes, quarters = r.randint(2, 30), r.randint(2, 30), r.randint(1, 20)
    return {
        "n": nickels,
        "d": dimes,
        "q": quarters,
        "answer": 5 * nickels + 10 * dimes + 25 * quarters,
    }


def _p_recipe(r: random.Random) -> dict[str, object]:
    cups, batch, mult = r.randint(2, 7), r.randint(12, 36), r.randint(2, 6)
    return {"cups": cups, "batch": batch, "want": batch * mult, "answer": cups * mult}


def _p_consecutive(r: random.Random) -> dict[str, object]:
    low = r.randint(-30, 200)
    return {"total": 3 * low + 3, "answer": low + 2}


def _p_quadval(r: random.Random) -> dict[str, object]:
    a, b, c, x = r.randint(1, 9), r.randint(-9, 9), r.randint(-20, 20), r.randint(-6, 9)
    sign_b = "+" if b >= 0 else "-"
    sign_c = "+" if c >= 0 else "-"
    return {
        "f": f"{a}x^2 {sign_b} {abs(b)}x {sign_c} {abs(c)}",
        "x": x,
        "answer": a * x * x + b * x + c,
    }


def _p_zeros(r: random.Random) -> dict[str, object]:
    n = r.randint(25, 900)
    count, p = 0, 5
    while p <= n:
        count, p = count + n // p, p * 5
    return {"n": n, "answer": count}


def _p_box(r: random.Random) -> dict[str, object]:
    a, b, c = r.randint(2, 25), r.randint(2, 25), r.randint(2, 25)
    return {"a": a, "b": b, "c": c, "answer": a * b * c}


def _p_geo(r: random.Random) -> dict[str, object]:
    a, q, n = r.randint(1, 9), r.randint(2, 4), r.randint(4, 9)
    return {"a": a, "q": q, "n": n, "nth": _ordinal(n), "answer": a * q ** (n - 1)}


def _p_squares(r: random.Random) -> dict[str, object]:
    top = r.randint(50, 5000)
    return {"top": top, "answer": math.isqrt(top - 1)}


def _p_share(r: random.Random) -> dict[str, object]:
    x, y, unit = r.randint(1, 9), r.randint(1, 9), r.randint(3, 40)
    return {"x": x, "y": y, "total": (x + y) * unit, "answer": max(x, y) * unit}


def _p_sum(r: random.Random) -> dict[str, object]:
    n = r.randint(15, 300)
    return {"n": n, "answer": n * (n + 1) // 2}


VALUE_GENERATORS = {
    "arithmetic_term": _p_arith,
    "rectangle_area": _p_rect,
    "linear_equation": _p_linear,
    "discount": _p_discount,
    "gcd": _p_gcd,
    "lcm": _p_lcm,
    "power_mod": _p_powmod,
    "divisor_count": _p_divisors,
    "marble_probability": _p_marbles,
    "committee": _p_choose,
    "word_arrangements": _p_word,
    "travel_time": _p_travel,
    "missing_score": _p_mean,
    "hypotenuse": _p_hyp,
    "circle_area": _p_circle,
    "root_squares": _p_roots,
    "pipes": _p_pipes,
    "simple_interest": _p_interest,
    "ages": _p_ages,
    "powers_of_two": _p_powers,
    "base_conversion": _p_base,
    "digit_sum": _p_digits,
    "count_multiples": _p_multiples,
    "triangle_angle": _p_angles,
    "polygon_angles": _p_polygon,
    "coins": _p_coins,
    "recipe": _p_recipe,
    "consecutive": _p_consecutive,
    "evaluate_quadratic": _p_quadval,
    "trailing_zeros": _p_zeros,
    "box_volume": _p_box,
    "geometric_term": _p_geo,
    "small_squares": _p_squares,
    "ratio_share": _p_share,
    "triangular_sum": _p_sum,
}
"""Each template's numbers; its phrasings (setups, then asks) are data, in demo_templates.json."""


def _load_templates() -> tuple[Template, ...]:
    phrasings = json.loads((Path(__file__).parent / "demo_templates.json").read_text())
    return tuple(
        Template(key, params, tuple(phrasings[key]["setups"]), tuple(phrasings[key]["asks"]))
        for key, params in VALUE_GENERATORS.items()
    )


TEMPLATES = _load_templates()


# Optional first sentences: context that real problem sets carry, and wording variety.
LEAD_INS = (
    "",
    "",
    "",
    "",
    "This one comes from a weekend worksheet.",
    "Here is a short exercise on everyday numbers.",
    "A question from the school math club.",
    "The following appeared on a practice sheet.",
    "Consider this situation carefully.",
    "A small puzzle from a family game night.",
    "Read the setting, then answer.",
    "From a notebook of review problems.",
    "A classic kind of textbook question.",
    "Math circle, session three.",
    "An example from a tutoring session.",
    "This came up while planning a trip.",
    "A story problem for beginners.",
    "Taken from a quiz on basic skills.",
    "Level: easy.",
    "Topic review.",
)


def _render(template: Template, values: dict[str, object], setup: int, ask: int) -> str:
    values = dict(values)
    if "f" in values:  # evaluate_quadratic renders its polynomial in the setup's variable
        poly = str(values["f"])
        values["f_t"], values["f_z"] = poly.replace("x", "t"), poly.replace("x", "z")
    lead = str(values.get("lead", ""))
    body = template.setups[setup].format(**values) + " " + template.asks[ask].format(**values)
    return f"{lead} {body}" if lead else body


# -- benchmark ---------------------------------------------------------------------------
# Eight problem kinds, each in four phrasings that share no run of nine words, so every
# item is told apart by word 9-grams (checked by `demo_rows`).

BENCHMARK_SIZE = 32


def _bench_lattice(r: random.Random, v: int) -> tuple[str, str]:
    a, b = r.randint(3, 9), r.randint(3, 9)
    texts = (
        f"A beetle crawls along the grid lines of a lattice from the corner $(0,0)$ to the "
        f"corner $({a},{b})$, and at each move it steps one unit either to the right or "
        f"upward. Along how many distinct routes can the journey be completed?",
        f"On a city map the streets form a perfect rectangular grid. Starting at the southwest "
        f"intersection, a courier must reach the point {a} blocks east and {b} blocks north, "
        f"never heading west or south. Count the shortest paths available to the courier.",
        f"Strings are made of exactly {a} copies of the letter R together with {b} copies of "
        f"the letter U, arranged in some order. Each string describes a monotone staircase "
        f"walk. How many different strings of this kind can be written down?",
        f"A rook-like token sits in the lower-left cell of a board with {a + 1} columns and "
        f"{b + 1} rows; every turn it slides to the adjacent cell on its right or the one "
        f"above it. In how many ways may it travel to the upper-right cell?",
    )
    return texts[v], str(math.comb(a + b, a))


def _bench_digits(r: random.Random, v: int) -> tuple[str, str]:
    k = r.randint(3, 4)
    target = r.randint(6, 9 * k - 6)
    count = sum(1 for n in range(10 ** (k - 1), 10**k) if sum(map(int, str(n))) == target)
    texts = (
        f"Call a positive integer balanced if it has exactly {k} decimal digits, its leading "
        f"digit is not zero, and the digits sum to exactly {target}. How many balanced "
        f"integers exist altogether?",
        f"Odometer readings on a vintage scooter always show {k} figures with a nonzero first "
        f"figure. For how many such readings do the figures total {target} when added?",
        f"Determine the count of {k}-digit natural numbers (no leading zeros allowed) whose "
        f"decimal digits have a combined sum equal to {target}.",
        f"A lock code uses {k} dials showing digits 0 through 9, but the first dial may never "
        f"rest on 0. Exactly how many codes have dial values adding up to {target}?",
    )
    return texts[v], str(count)


def _bench_clock(r: random.Random, v: int) -> tuple[str, str]:
    hour, minute = r.randint(1, 11), r.choice((10, 20, 30, 40, 50))
    angle = abs(Fraction(60 * hour - 11 * minute, 2))
    angle = min(angle, 360 - angle)
    texts = (
        f"On an ordinary analog clock with an hour hand and a minute hand, the time shown is "
        f"{hour}:{minute:02d} in the afternoon. Measured in degrees, how wide is the smaller "
        f"angle formed between the two hands at that moment?",
        f"A wall clock keeps perfect time, and both of its hands move continuously. At "
        f"exactly {minute} minutes past {hour} o'clock, what is the lesser of the two angles "
        f"between the hands, expressed in degrees?",
        f"Imagine the dial of a watch at {hour}:{minute:02d}. Treating the hour hand as "
        f"sweeping smoothly between numerals, compute the size, in degrees, of the non-reflex "
        f"angle that separates it from the minute hand.",
        f"The town hall clock strikes {hour} and then {minute} further minutes elapse. Find "
        f"the measure of the acute or obtuse angle, in degrees, enclosed by its two hands at "
        f"that instant.",
    )
    return texts[v], _fraction(angle)


def _bench_staircase(r: random.Random, v: int) -> tuple[str, str]:
    steps = r.randint(8, 16)
    ways = [1, 1]
    for _ in range(steps - 1):
        ways.append(ways[-1] + ways[-2])
    texts = (
        f"Leonie climbs a staircase of {steps} steps, and with each stride she either advances "
        f"a single step or skips ahead by two steps at once. In how many different sequences "
        f"of strides can she arrive exactly on the top step?",
        f"A strip of length {steps} is to be covered completely by tiles of length one and "
        f"length two placed end to end. Order matters, since the tiles form a visible pattern. "
        f"How many tilings are possible?",
        f"Compositions of the integer {steps} are ordered lists of positive parts summing to "
        f"it. Restricting every part to be either 1 or 2, how many such compositions are "
        f"there in total?",
        f"A frog hops along lily pads numbered 0 to {steps}, starting on pad 0, and each hop "
        f"carries it forward by one pad or by two pads. Find how many hop sequences bring the "
        f"frog precisely to pad {steps}.",
    )
    return texts[v], str(ways[steps])


def _bench_tournament(r: random.Random, v: int) -> tuple[str, str]:
    teams = r.randint(6, 20)
    texts = (
        f"Exactly {teams} chess clubs enter a round-robin league in which every club meets "
        f"every other club precisely once, and no rematches are ever scheduled. How many "
        f"matches are played over the course of the whole league season?",
        f"At a reunion, {teams} former classmates each shake hands with everyone else present "
        f"one time only. What is the total number of handshakes exchanged?",
        f"Mark {teams} points on a circle, no three of them collinear, and join every pair of "
        f"points with a straight chord. How many chords get drawn?",
        f"A volleyball festival pairs up each of its {teams} participating squads against "
        f"each remaining squad for a single game. Compute how many games the organisers must "
        f"put on the schedule.",
    )
    return texts[v], str(teams * (teams - 1) // 2)


def _bench_garden(r: random.Random, v: int) -> tuple[str, str]:
    side, path = r.randint(10, 40), r.randint(1, 4)
    texts = (
        f"A square lawn with side length {side} meters is surrounded on the outside by a "
        f"gravel walkway of uniform width {path} meters, so the lawn and walkway together also "
        f"form a square. What is the area of the walkway alone, in square meters?",
        f"A square photograph {side} cm wide is glued onto a square mat that extends {path} cm "
        f"beyond the photo on every side. How many square centimeters of mat remain visible?",
        f"Around a square swimming pool of edge {side} feet, contractors lay a tiled border "
        f"{path} feet wide that hugs all four edges. Find the area covered by the tiled border "
        f"in square feet.",
        f"A square quilt measuring {side} inches on each side receives a fabric trim of "
        f"constant width {path} inches sewn around its perimeter, outward. Compute the area "
        f"of the trim alone, in square inches.",
    )
    return texts[v], str((side + 2 * path) ** 2 - side * side)


def _bench_dice(r: random.Random, v: int) -> tuple[str, str]:
    total = r.randint(4, 10)
    hits = sum(1 for a in range(1, 7) for b in range(1, 7) if a + b == total)
    texts = (
        f"Two fair six-sided dice, one colored crimson and one colored ivory, are rolled "
        f"together a single time. Give the probability that the two numbers facing up add "
        f"to exactly {total}, written as a fraction in lowest terms.",
        f"A board game asks each player to throw a pair of standard cubes numbered one to six. "
        f"What is the chance that the pips showing sum to {total}? Express it as a common "
        f"fraction.",
        f"Mina tosses an ordinary die twice in a row and adds the two outcomes. Find the "
        f"probability, as a reduced fraction, that her total equals {total}.",
        f"Pick an ordered pair of integers, each chosen uniformly and independently from one "
        f"through six. Compute the likelihood that the pair has sum {total}, as a fraction in "
        f"simplest form.",
    )
    return texts[v], _fraction(Fraction(hits, 36))


def _bench_palindromes(r: random.Random, v: int) -> tuple[str, str]:
    low = r.randint(1, 5) * 1000
    high = low + r.randint(2, 4) * 1000
    count = sum(1 for n in range(low, high + 1) if str(n) == str(n)[::-1])
    texts = (
        f"A palindrome reads identically forwards and backwards, like 2552 or 7007. Counting "
        f"every whole number from {low} up to and including {high}, how many of these "
        f"numbers turn out to be palindromes?",
        f"Ticket numbers at a fair run consecutively from {low} through {high}. A ticket is a "
        f"winner when its number is unchanged by reversing the order of its digits. How many "
        f"winning tickets were printed?",
        f"Determine the quantity of integers $m$ satisfying ${low} \\le m \\le {high}$ whose "
        f"digit string is symmetric, meaning the first digit matches the last and the second "
        f"matches the third.",
        f"Calendar years between {low} and {high}, inclusive, are examined one by one. Find "
        f"how many of those years would look the same if their four digits were written in "
        f"reverse order.",
    )
    return texts[v], str(count)


_BENCH_KINDS: tuple[Callable[[random.Random, int], tuple[str, str]], ...] = (
    _bench_lattice,
    _bench_digits,
    _bench_clock,
    _bench_staircase,
    _bench_tournament,
    _bench_garden,
    _bench_dice,
    _bench_palindromes,
)


def _benchmark_items(r: random.Random) -> list[dict[str, str]]:
    """32 contest-style items: eight kinds, four phrasings each, in a shuffled order."""
    pairs = [(kind, v) for v in range(4) for kind in _BENCH_KINDS]
    items: list[dict[str, str]] = []
    for index, (kind, v) in enumerate(pairs):
        problem, answer = kind(r, v)
        items.append({"id": f"bench-{index + 1:02d}", "problem": problem, "answer": answer})
    grams = [word_ngrams(item["problem"]) for item in items]
    for i in range(len(items)):
        for j in range(i):
            if grams[i] & grams[j]:
                raise RuntimeError(
                    f"demo benchmark items {items[j]['id']} and {items[i]['id']} share a 9-gram"
                )
    return items


# -- planted cases ---------------------------------------------------------------------------


def _mcq(r: random.Random, index: int) -> tuple[str, str]:
    a, b = r.randint(3, 20), r.randint(3, 20)
    right = a * b
    options = sorted(
        {right, right + r.randint(1, 5), right - r.randint(1, 5), right + 7, right + 12}
    )
    letters = "ABCDE"
    style = index % 4
    stem = f"A hall has {a} rows of seats with {b} seats in each row. How many seats are there?"
    if style == 0:
        listed = " \\qquad ".join(
            f"\\textbf{{({letters[i]})}}\\ {v}" for i, v in enumerate(options)
        )
        return f"{stem}\n\n${listed}$", str(right)
    if style == 1:
        listed = "\n".join(f"{letters[i]}. {v}" for i, v in enumerate(options))
        return f"{stem} Choose one option.\n\n{listed}", str(right)
    if style == 2:
        listed = " ".join(f"({letters[i]}) {v}" for i, v in enumerate(options))
        return f"{stem}\n{listed}", str(right)
    listed = ", ".join(str(v) for v in options[:-1]) + f" or {options[-1]}"
    return (
        f"A hall has {a} rows of {b} seats. Which of the following is the number of seats: {listed}?",
        str(right),
    )


def _proof(r: random.Random, index: int) -> tuple[str, str]:
    k = r.randint(2, 9)
    statements = (
        f"Prove that for every positive integer $n$, the number $n^{{{k}}} - n^{{{k - 1}}}$ is even.",
        f"Show that the sum of any {2 * k + 1} consecutive integers is divisible by {2 * k + 1}.",
        f"Let $a$ and $b$ be positive reals with $a + b = {k}$. Prove that $ab \\le {Fraction(k * k, 4)}$.",
        f"For a triangle with sides $x$, $y$, $z$ and perimeter {2 * k + 4}, show that each side is shorter than {k + 2}.",
        f"If $p > {k}$ is a prime, prove or disprove that $p^2 - 1$ is divisible by 24.",
    )
    return statements[index % len(statements)], "\\text{proof}"


def _multi_question(r: random.Random, index: int) -> tuple[str, str]:
    a, b = r.randint(2, 30), r.randint(2, 30)
    if index % 2 == 0:
        return (
            f"A rectangle has sides {a} cm and {b} cm.\n(a) Find its perimeter.\n"
            f"(b) Find its area.",
            f"{2 * (a + b)}, {a * b}",
        )
    return (
        f"The numbers {a} and {b} are written on a board. What is their sum? What is their "
        f"product?",
        f"{a + b}, {a * b}",
    )


def _figure(r: random.Random, index: int) -> tuple[str, str]:
    a, b = r.randint(2, 15), r.randint(2, 15)
    texts = (
        f"In the diagram below, the shaded strip has width {a} and length {b}. What is the area of the shaded strip?",
        f"A square is divided into {a} congruent pieces as shown in the figure. If one piece has area {b}, find the area of the square.",
        f"Using the graph shown below, find the slope of the line through the marked points {a} units apart.",
        f"![figure](figures/problem_{index:02d}.png)\nThe figure above shows {a} identical tiles of area {b}. Find the total area.",
        f"See the picture: a path of {a} equal segments, each {b} cm long, is drawn. How long is the path in centimeters?",
    )
    answers = (a * b, a * b, b, a * b, a * b)
    return texts[index % len(texts)], str(answers[index % len(texts)])


def _non_english(r: random.Random, index: int) -> tuple[str, str]:
    a, b = r.randint(3, 40), r.randint(3, 40)
    texts = (
        f"Soit $x$ un nombre réel tel que $x + {a} = {a + b}$. Trouver la valeur de $x$ pour que l'égalité soit vraie.",
        f"Un jardin rectangulaire mesure {a} mètres sur {b} mètres. Quelle est son aire en mètres carrés ?",
        f"Sea $n$ un número entero tal que $n - {a} = {b}$. ¿Cuál es el valor de $n$ que cumple la ecuación?",
        f"Ein Zug fährt {a * b} Kilometer mit einer Geschwindigkeit von {a} km/h. Wie viele Stunden dauert die Fahrt?",
        f"一个长方形的长是 {a} 厘米，宽是 {b} 厘米。求这个长方形的面积。",
        f"Найдите сумму чисел {a} и {b}, если каждое из них увеличить на единицу.",
        f"Cho hình chữ nhật có chiều dài {a} mét và chiều rộng {b} mét. Tính diện tích của hình chữ nhật đó.",
    )
    answers = (b, a * b, a + b, b, a * b, a + b + 2, a * b)
    return texts[index % len(texts)], str(answers[index % len(texts)])


_UNPARSEABLE_ANSWERS = (
    "\\frac{3}{",
    "x^2+",
    "???",
    "}{)",
    "\\sqrt{",
    "=",
    "(",
    "\\left(",
    "^",
    "\\frac",
)


def _unparseable(r: random.Random, index: int, problem: str) -> tuple[str, str]:
    return problem, _UNPARSEABLE_ANSWERS[index % len(_UNPARSEABLE_ANSWERS)]


# -- copies and edits ------------------------------------------------------------------------

_SWAPS = (
    ("What is", "What's"),
    ("Find", "Determine"),
    ("How many", "How many total"),
    ("Compute", "Calculate"),
    ("exactly", "precisely"),
    ("total", "overall"),
    ("number", "count"),
)
_PREFIXES = ("Homework problem: ", "Practice question: ", "Exercise: ", "Warm-up: ")


def _near_dup(text: str, edit: str, r: random.Random) -> str:
    """A small edit of `text` that keeps its numbers (and so its answer)."""
    if edit == "respace_case":
        return re.sub(r"\s+", "  ", text).upper() if r.random() < 0.5 else " " + text.lower() + " "
    if edit == "punctuation":
        edited = text.replace(",", "")
        edited = edited[:-1] + "." if edited.endswith("?") else edited + "."
        return edited
    if edit == "word_swap":
        for old, new in r.sample(_SWAPS, len(_SWAPS)):
            if old in text:
                return text.replace(old, new, 1)
        return text.replace(" a ", " one ", 1) if " a " in text else "So: " + text
    if edit == "typo":  # swap two different adjacent letters inside one longer word
        spots = [
            (m.start() + i, m.group(0))
            for m in re.finditer(r"\b[a-z]{6,}\b", text)
            for i in range(1, len(m.group(0)) - 2)
            if m.group(0)[i] != m.group(0)[i + 1]
        ]
        if not spots:
            return text + " thx"
        at, _ = r.choice(spots)
        return text[:at] + text[at + 1] + text[at] + text[at + 2 :]
    return r.choice(_PREFIXES) + text


def _respace(text: str) -> str:
    """Re-space a benchmark item: `$x$` -> `$ x $`, doubled spaces, a line break."""

    def spaced_math(match: re.Match[str]) -> str:
        inner = re.sub(r"\s*([=+\-<>(),^{}])\s*", r" \1 ", match.group(1))
        return "$ " + " ".join(inner.split()) + " $"

    spaced = re.sub(r"\$([^$]+)\$", spaced_math, text)
    words = spaced.split(" ")
    middle = len(words) // 2
    return "  ".join(words[:middle]) + "\n" + " ".join(words[middle:])


_INSTRUCTIONS = (
    "Solve the following problem and put your final answer within \\boxed{}.\n\n",
    "Please solve the following math problem carefully.\n",
    "Answer the following question. Reason step by step before giving the final answer.\n\n",
    "You are a helpful assistant. Solve the following problem.\n",
)
_EMBED_BEFORE = (
    "I was going through an old contest packet with my study group and this one stumped us all. ",
    "Our teacher put this on the board last Friday as a bonus challenge for the weekend. ",
    "Found this in a puzzle book my grandmother gave me years ago. ",
    "My friend and I argued about this for an hour on the train home. ",
)
_EMBED_AFTER = (
    " I tried listing small cases but lost track halfway through.",
    " Any hint would be appreciated, thanks in advance.",
    " We got two different answers and are not sure which one is right.",
    " I would love to see a clean argument for this one.",
)


def _half(text: str) -> str:
    """The last 60% of the item's words, after an own lead-in: a half-quoted copy."""
    words = text.split()
    return "Here is a variant of a contest question. " + " ".join(words[len(words) * 2 // 5 :])


# -- similarity checks used while generating ---------------------------------------------------


def _shingles(text: str, n: int = 5) -> frozenset[str]:
    flat = re.sub(r"\s+", " ", text.lower()).strip()
    return frozenset(flat[i : i + n] for i in range(max(1, len(flat) - n + 1)))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two shingle sets."""
    return len(a & b) / len(a | b) if a or b else 1.0


def word_ngrams(text: str, n: int = 9) -> set[tuple[str, ...]]:
    """Word n-grams of lower-cased text with punctuation removed (LaTeX `$` included)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


# -- the generator ---------------------------------------------------------------------------


def _row(
    problem: str, answer: str | None, case: str, of: str | None = None, edit: str | None = None
) -> dict[str, object]:
    return {
        "problem": problem,
        "answer": answer,
        "demo_case": case,
        "demo_of": of,
        "demo_edit": edit,
    }


def _clean_rows(
    r: random.Random, bench_grams: set[tuple[str, ...]], count: int, accepted: list[frozenset[str]]
) -> list[tuple[dict[str, object], tuple]]:
    """`count` rows from the templates, none close to each other or to the benchmark."""
    rows: list[tuple[dict[str, object], tuple]] = []
    combos = [
        (t, s, a)
        for t, tpl in enumerate(TEMPLATES)
        for s in range(len(tpl.setups))
        for a in range(len(tpl.asks))
    ]
    attempts = 0
    while len(rows) < count:
        attempts += 1
        if attempts > count * 50:
            raise RuntimeError("demo generator could not find enough distinct clean rows")
        t, s, a = r.choice(combos)
        template = TEMPLATES[t]
        values = template.params(r)
        values.update(name=r.choice(NAMES), container=r.choice(CONTAINERS), lead=r.choice(LEAD_INS))
        text = _render(template, values, s, a)
        grams = _shingles(text)
        if word_ngrams(text) & bench_grams:
            continue
        # rows of different templates share little wording (tests check all pairs)
        if any(jaccard(grams, other) >= MAX_CLEAN_JACCARD for other in accepted[t]):
            continue
        accepted[t].append(grams)
        rows.append((_row(text, str(values["answer"]), "clean"), (t, s, a, values)))
    return rows


def demo_rows(seed: int = SEED) -> tuple[list[dict[str, object]], list[dict[str, str]]]:
    """The demo corpus rows (with ids, in file order) and the demo benchmark items."""
    r = random.Random(seed)
    bench = _benchmark_items(r)
    bench_grams = set().union(*(word_ngrams(item["problem"]) for item in bench))

    accepted: list[list[frozenset[str]]] = [[] for _ in TEMPLATES]
    clean = _clean_rows(r, bench_grams, CLEAN_ROWS, accepted)
    extra = _clean_rows(r, bench_grams, 25, accepted)  # texts for missing/unparseable answers

    # copies of clean rows: keys point at positions in `clean`
    # near duplicates copy rows long enough that a small edit keeps Jaccard >= 0.8;
    # siblings copy rows with numbers in the text, so the sibling's numbers differ
    long_rows = [i for i, (row, _) in enumerate(clean) if len(str(row["problem"])) >= 110]
    near_picked = r.sample(long_rows, DUPLICATE_COUNTS["near_dup"])
    numbered = [
        i
        for i in range(CLEAN_ROWS)
        if i not in set(near_picked) and re.search(r"\d", str(clean[i][0]["problem"]))
    ]
    sibling_picked = r.sample(numbered, DUPLICATE_COUNTS["sibling"])
    used = set(near_picked) | set(sibling_picked)
    rest = [i for i in range(CLEAN_ROWS) if i not in used]
    exact_picked = r.sample(rest, DUPLICATE_COUNTS["exact_dup"])

    copies: list[tuple[dict[str, object], int]] = []
    for source in exact_picked:
        row = clean[source][0]
        copies.append((_row(str(row["problem"]), str(row["answer"]), "exact_dup"), source))
    for i, source in enumerate(near_picked):
        row = clean[source][0]
        edit = NEAR_DUP_EDITS[i % len(NEAR_DUP_EDITS)]
        text = _near_dup(str(row["problem"]), edit, r)
        copies.append((_row(text, str(row["answer"]), "near_dup", edit=edit), source))
    for source in sibling_picked:
        row, (t, s, a, values) = clean[source]
        template = TEMPLATES[t]
        for _attempt in range(200):
            other = template.params(r)
            other.update(name=values["name"], container=values["container"], lead=values["lead"])
            if str(other["answer"]) != str(values["answer"]):
                break
        text = _render(template, other, s, a)
        copies.append((_row(text, str(other["answer"]), "sibling", edit="numbers"), source))

    # benchmark copies, each of a different item
    contaminated: list[dict[str, object]] = []
    items = iter(r.sample(bench, sum(CONTAMINATION_COUNTS.values())))
    for case, n in CONTAMINATION_COUNTS.items():
        for i in range(n):
            item = next(items)
            text = item["problem"]
            if case == "contaminated_respaced":
                text = _respace(text)
            elif case == "contaminated_prefixed":
                text = _INSTRUCTIONS[i % len(_INSTRUCTIONS)] + text
            elif case == "contaminated_embedded":
                text = _EMBED_BEFORE[i % 4] + text + _EMBED_AFTER[(i + 1) % 4]
            elif case == "contaminated_half":
                text = _half(text)
            contaminated.append(
                _row(
                    text,
                    item["answer"],
                    case,
                    of=item["id"],
                    edit=case.removeprefix("contaminated_"),
                )
            )

    planted: list[dict[str, object]] = []
    makers = {
        "multiple_choice": _mcq,
        "proof": _proof,
        "multi_question": _multi_question,
        "figure_reference": _figure,
        "non_english": _non_english,
    }
    for case, make in makers.items():
        for i in range(20):
            problem, answer = make(r, i)
            planted.append(_row(problem, answer, case))
    blanks = (None, "", "   ")
    for i in range(15):
        planted.append(_row(str(extra[i][0]["problem"]), blanks[i % 3], "missing_answer"))
    for i in range(10):
        problem, answer = _unparseable(r, i, str(extra[15 + i][0]["problem"]))
        planted.append(_row(problem, answer, "unparseable_answer"))

    # file order: clean rows, planted and contaminated rows shuffled in; each copy lands
    # somewhere after its original
    ordered: list[dict[str, object]] = [row for row, _ in clean]
    for row in [*contaminated, *planted]:
        ordered.insert(r.randrange(len(ordered) + 1), row)
    for row, source in copies:
        at = next(i for i, o in enumerate(ordered) if o is clean[source][0])
        ordered.insert(r.randrange(at + 1, len(ordered) + 1), row)
    ids = {id(row): f"demo-{i + 1:04d}" for i, row in enumerate(ordered)}
    for row, source in copies:
        row["demo_of"] = ids[id(clean[source][0])]
    corpus = [{"id": ids[id(row)], **row} for row in ordered]
    return corpus, bench


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    lines = [json.dumps(row, ensure_ascii=False) + "\n" for row in rows]
    path.write_bytes("".join(lines).encode("utf-8"))


def write_demo_corpus(directory: str | Path, seed: int = SEED) -> DemoPaths:
    """Write the demo corpus and its benchmark under `directory` (created if missing)."""
    root = Path(directory)
    sources, benchmarks = root / "sources", root / "benchmarks"
    sources.mkdir(parents=True, exist_ok=True)
    benchmarks.mkdir(parents=True, exist_ok=True)
    corpus, bench = demo_rows(seed)
    corpus_path, bench_path = sources / "demo_math.jsonl", benchmarks / "demo_bench.jsonl"
    _write_jsonl(corpus_path, corpus)
    _write_jsonl(bench_path, bench)  # type: ignore[arg-type]
    return DemoPaths(root, (corpus_path,), benchmarks, bench_path)
