"""Rule filters on real problems: true positives and true negatives, picked by row index.

Rows come from ../shared/data/sources (MATH train, AIME 1983-2023, GSM8K train and raw AoPS
threads); each test names the rows it relies on and why they are positives or negatives.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from curation.math.filters import (
    _SIMPLE_ANSWER,
    DEFAULT_RULES,
    RULES,
    answer_parse_error,
    apply_rule,
    figure_reference,
    filter_math_rl_prompts,
    measure_rules,
    missing_answer,
    multi_question,
    multiple_choice,
    non_english,
    proof,
    unparseable_answer,
)
from lake.steps import drop_rows


def _prompts(problems: list[str], answers: list[str | None], source: str) -> pl.DataFrame:
    n = len(problems)
    return pl.DataFrame(
        {
            "id": [f"{source}-{i}" for i in range(n)],
            "source": [source] * n,
            "source_id": [str(i) for i in range(n)],
            "domain": ["math"] * n,
            "problem": problems,
            "answer": answers,
            "metadata": ["{}"] * n,
        },
        schema={
            "id": pl.String,
            "source": pl.String,
            "source_id": pl.String,
            "domain": pl.String,
            "problem": pl.String,
            "answer": pl.String,
            "metadata": pl.String,
        },
    )


def load_source(shared_data: Path, name: str) -> pl.DataFrame:
    """One shared source as a `prompts` frame; `id` is `<name>-<row index>`."""
    raw = pl.read_ndjson(shared_data / "sources" / f"{name}.jsonl")
    if name == "gsm8k_train":  # the answer field is a solution ending in "#### N"
        problems = raw["question"].to_list()
        answers = raw["answer"].str.extract(r"####\s*(.+)$").str.strip_chars().to_list()
    elif name == "openmath_aops_threads":  # raw forum threads: no reference answer
        problems, answers = raw["forum_post"].to_list(), [None] * raw.height
    else:
        problems, answers = raw["problem"].to_list(), raw["answer"].cast(pl.String).to_list()
    return _prompts(problems, answers, name)


def load_benchmark_rows(shared_data: Path, name: str) -> pl.DataFrame:
    """A shared benchmark file as a `prompts` frame (real problems of other sets)."""
    records = [
        json.loads(line)
        for line in (shared_data / "benchmarks" / f"{name}.jsonl").read_text().splitlines()
    ]
    key = "answer" if "answer" in records[0] else "expected_answer"
    answers = [None if r.get(key) is None else str(r[key]) for r in records]
    return _prompts([r["problem"] for r in records], answers, name)


@pytest.fixture(scope="module")
def sources(shared_data: Path) -> dict[str, pl.DataFrame]:
    names = ("math_train", "aime_1983_2023", "gsm8k_train", "openmath_aops_threads")
    frames = {name: load_source(shared_data, name) for name in names}
    for name in ("amc22_23", "minerva_math", "olympiadbench", "aime25"):
        frames[name] = load_benchmark_rows(shared_data, name)
    return frames


@pytest.fixture(scope="module")
def shared_data() -> Path:  # module scope: the frames above are loaded once
    path = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    assert path.exists(), f"shared data not found at {path}"
    return path


def rows(sources: dict[str, pl.DataFrame], name: str, indices: list[int]) -> pl.DataFrame:
    return sources[name][indices]


def flagged_ids(result_dropped: pl.DataFrame) -> set[str]:
    return set(result_dropped["id"].to_list())


def ids(name: str, indices: list[int]) -> set[str]:
    return {f"{name}-{i}" for i in indices}


def check(rule, sources, positives: dict[str, list[int]], negatives: dict[str, list[int]]):
    """Every positive row is dropped by `rule` with its reason; no negative row is."""
    for name, indices in positives.items():
        result = rule(rows(sources, name, indices))
        missed = ids(name, indices) - flagged_ids(result.dropped)
        assert not missed, f"{rule.__name__} missed {sorted(missed)}"
        assert set(result.dropped["reason"]) == {rule.__name__}
        assert result.dropped["evidence"].null_count() == 0
    for name, indices in negatives.items():
        result = rule(rows(sources, name, indices))
        wrong = flagged_ids(result.dropped)
        assert not wrong, f"{rule.__name__} wrongly flagged {sorted(wrong)}: " + str(
            result.dropped.select("id", "evidence").to_dicts()
        )
        assert result.kept.height == len(indices)


# -- multiple choice ---------------------------------------------------------------------


def test_multiple_choice_real_rows(sources):
    check(
        multiple_choice,
        sources,
        positives={
            # \textbf{(A)} ... \qquad; "(A) $-2^{50}$ (B)"; line-start "A) 65.141";
            # "\text A. 21 \qquad"; line-start "A. $-\sqrt{3}$"; "(A) Line\n(B) Circle";
            # options with \mathrm{(A)}; unlabelled "Which of the following points ...".
            "math_train": [2164, 2173, 6356, 5434, 900, 6790, 3086, 265],
        },
        negatives={
            # 62: "$B$ is at $(8,-1)$" and asy code; 1775/6779/7421: dot(A); reflect(B,C)*(A)
            # in [asy] code; 6080: conditions labelled (A) (B) (C); 1930: a story that
            # mentions "answer choices"; 1290/140: f(g(a)), g(a) function notation.
            "math_train": [62, 1775, 6779, 7421, 6080, 1930, 1290, 140],
            # conditions (a) (b) (c) and (d) in AIME problems are not options
            "aime_1983_2023": [646, 655, 659],
        },
    )


def test_no_multiple_choice_in_aime(sources):
    # AIME answers are integers 0-999 with no options; none of the 975 rows is MCQ
    result = multiple_choice(sources["aime_1983_2023"])
    assert result.dropped.height == 0, result.dropped.select("id", "evidence").to_dicts()


# -- proof -------------------------------------------------------------------------------


def test_proof_real_rows(sources):
    check(
        proof,
        sources,
        positives={
            # AoPS threads: "Prove that the sum...", "prove that this sequence has a limit",
            # "Show that, for positive reals", "prove or disprove", "Prove that:",
            # "\r\nShow that max(A,B,C)>=1"
            "openmath_aops_threads": [0, 2, 3, 4, 7, 8],
        },
        negatives={
            # 6303: "will the census show that"; 4346/7223: "it can be shown that"
            "math_train": [6303, 4346, 7223, 1864],
            # "Their results show that", "records show that"
            "gsm8k_train": [3755, 3950],
            # a thread that asks "Find the maximum area" and one with four numbered problems
            "openmath_aops_threads": [6, 9],
        },
    )


def test_no_proofs_in_answer_based_sets(sources):
    for name in ("math_train", "aime_1983_2023"):
        result = proof(sources[name])
        assert result.dropped.height == 0, (name, result.dropped["evidence"].to_list())


# -- figure reference ----------------------------------------------------------------------


def test_figure_reference_real_rows(sources):
    check(
        figure_reference,
        sources,
        positives={
            # "As shown in the figure", "as shown in the figure", "(see the figure below)",
            # "The figure shows four of the entries", "In the diagram below", "as shown."
            # (no [asy] in any of them)
            "aime_1983_2023": [35, 65, 104, 195, 324, 442],
            # "is shown in red below" (no graph given); "In the diagram, $BP$ and $BQ$";
            # "rests on the diagonal as shown"
            "math_train": [622, 2751, 3264],
        },
        negatives={
            # "In the diagram" / "as shown" followed by [asy] code: the figure is in the text
            # 2258: "illustrated in the diagram shown" with an array; 454: "lattice shown"
            # with a tabular; 1767: "shown below" with a written-out list; 1864: "numbers
            # shown on the dice"; 2507/2813: the image of a point under a map; 1309: a scale
            # drawing described in words; 316: "A figure is created by connecting ...".
            "math_train": [1253, 1321, 648, 686, 2258, 454, 1767, 1864, 2507, 2813, 1309, 316],
            # 166: "Note: The diagram was not given during the actual contest."
            # 241: "cuts this figure" (the parallelogram just described); 969: "shown
            # below" followed by an array
            "aime_1983_2023": [166, 241, 969],
            # stories: "taken pictures of all of the plants", "movies are shown"
            "gsm8k_train": [4122, 4215, 805, 1044],
        },
    )


def test_figure_reference_rows_of_other_real_sets(sources):
    check(
        figure_reference,
        sources,
        positives={
            # "The diagram below shows", "in the figure", "(Note: The figure is not drawn
            # to scale.)" with no figure in the text
            "amc22_23": [25, 28, 30],
            "minerva_math": [202],  # \includegraphics{...}: an image file
            "aime25": [17],  # "One way to do this is shown below" with nothing below
        },
        negatives={
            # "Each selfie will have either two or three students in the picture"
            "olympiadbench": [608],
            # "The benzene molecule is shown below:" followed by \chemfig code
            "minerva_math": [252],
        },
    )


def test_figure_reference_image_link_is_flagged_even_with_asy():
    df = _prompts(
        [
            "![triangle](img/tri.png) Find the area of the triangle.",
            "Find $x$.\n[asy]draw((0,0)--(1,1));[/asy]\n\\includegraphics{fig2}",
            "In the diagram, $AB = 3$.\n[asy]draw((0,0)--(3,0));[/asy]\nFind $AB^2$.",
        ],
        ["6", "1", "9"],
        "synthetic",
    )
    result = figure_reference(df)
    assert result.dropped["id"].to_list() == ["synthetic-0", "synthetic-1"]
    assert all(e.startswith("image link") for e in result.dropped["evidence"])


# -- multiple questions ----------------------------------------------------------------------


def test_multi_question_real_rows(sources):
    check(
        multi_question,
        sources,
        positives={
            # four numbered problems in one post, each with its own ask
            "openmath_aops_threads": [9],
        },
        negatives={
            # 122/1392/5482: "Find x ... What is a+b+c?" (find, then report a function of
            # the form); 2400: "...? That is, in how many ways ...?" (a restatement);
            # 1864/2046: "What is the probability? Express your answer as a fraction.";
            # 333: "Find all points. List the points in order ..." (a format instruction);
            # 2169: conditions (1) (2) under one question.
            "math_train": [122, 1392, 5482, 2400, 1864, 2046, 333, 2169],
            # conditions (a)-(d) followed by one "Find"
            "aime_1983_2023": [646, 655, 659],
            # 4717: "twice as many polar bears?" is a statement with a typo;
            # 502: a question inside a quoted sticker text
            "gsm8k_train": [4717, 502, 1258],
        },
    )


def test_multi_question_rows_of_other_real_sets(sources):
    check(
        multi_question,
        sources,
        positives={
            # "Subproblem 0: ... Solution: ... Subproblem 1: ...?" several parts in one
            "minerva_math": [12, 41, 46],
            # "Prove that there are only finitely many ... Find the largest among them."
            "olympiadbench": [34],
        },
        negatives={
            # "What is the weight ...? The answer can be written in the form m/n ...
            # What is m-n?": the second question reports the first answer
            "amc22_23": [52, 61, 62, 66],
            # "Compute the Laplace transform ... Show your work."
            "minerva_math": [120],
        },
    )


def test_multi_question_built_from_real_questions(sources):
    math = sources["math_train"]
    first, second = math["problem"][1290], math["problem"][140]
    df = _prompts(
        [
            f"(a) {first}\n(b) {second}",
            f"{first} {second}",  # two questions, each ending in '?'
            f"1. {first}\n2. {second}",
            f"{first}",  # one question: kept
        ],
        ["2, 4/3"] * 3 + ["2"],
        "combined",
    )
    result = multi_question(df)
    assert sorted(result.dropped["id"]) == ["combined-0", "combined-1", "combined-2"]
    measured = measure_rules(df, ["multi_question"])
    assert measured["asking_parts"].to_list()[:3] == [2, 0, 2]


# -- non-English -------------------------------------------------------------------------------

# MATH train row 1290 and GSM8K row 1027 translated by hand (the project's own text).
TRANSLATIONS = [
    "Étant donné que $a > 0$, si $f(g(a)) = 8$, où $f(x) = x^2 + 8$ et $g(x) = x^2 - 4$, "
    "quelle est la valeur de $a$ ?",
    "Dado que $a > 0$, si $f(g(a)) = 8$, donde $f(x) = x^2 + 8$ y $g(x) = x^2 - 4$, "
    "¿cuál es el valor de $a$?",
    "Es sei $a > 0$. Wenn $f(g(a)) = 8$ gilt, wobei $f(x) = x^2 + 8$ und $g(x) = x^2 - 4$ "
    "ist, wie groß ist dann $a$?",
    "已知 $a > 0$，若 $f(g(a)) = 8$，其中 $f(x) = x^2 + 8$，$g(x) = x^2 - 4$，求 $a$ 的值。",
    "Известно, что $a > 0$ и $f(g(a)) = 8$, где $f(x) = x^2 + 8$, $g(x) = x^2 - 4$. Найдите $a$.",
    "John đặt một họa sĩ vẽ cho anh một bức tranh kích thước 9 x 13. Một bức tranh đen trắng "
    "cỡ đó có giá 160 đô la. Anh ấy trả bao nhiêu tiền?",
    "John commissiona un artista per un disegno di 9 per 13. Un disegno in bianco e nero di "
    "quella misura costa 160 dollari. Quanto ha pagato, sapendo che il colore costa il 50% "
    "in più e che il prezzo della cornice è incluso per la consegna?",
]


def test_non_english_translations_of_real_rows_are_flagged():
    df = _prompts(TRANSLATIONS, ["2"] * len(TRANSLATIONS), "translated")
    result = non_english(df)
    assert result.dropped.height == len(TRANSLATIONS), result.kept["problem"].to_list()


def test_non_english_keeps_english_with_unicode(sources):
    # GSM8K rows with curly quotes, currency signs and accented names; AIME rows with
    # non-breaking spaces (114, 117, 319); English text with LaTeX everywhere (MATH).
    gsm = sources["gsm8k_train"].filter(pl.col("problem").str.contains(r"[^\x00-\x7f]"))
    assert gsm.height > 200
    for frame in (gsm, sources["aime_1983_2023"], sources["math_train"][:2000]):
        result = non_english(frame)
        assert result.dropped.height == 0, result.dropped.select("id", "evidence").to_dicts()


def test_non_english_threshold_is_a_parameter():
    df = _prompts(["Trouvez $x$ si $2x = 6$ : réponse numérique demandée."], ["3"], "fr")
    measured = measure_rules(df, ["non_english"])
    ratio = measured["ascii_letter_ratio"][0]
    assert 0.8 < ratio < 1.0
    assert non_english(df, min_ascii_letter_ratio=ratio + 0.01).dropped.height == 1
    assert (
        non_english(df, min_ascii_letter_ratio=ratio - 0.01, min_foreign_words=99).dropped.height
        == 0
    )


# -- reference answers -------------------------------------------------------------------------


def test_missing_answer_real_rows(sources):
    # MATH rows 886 and 1009 have a null answer, 5328 and 5330 an empty one
    result = missing_answer(sources["math_train"])
    assert flagged_ids(result.dropped) == ids("math_train", [886, 1009, 5328, 5330])
    aops = missing_answer(sources["openmath_aops_threads"])
    assert aops.kept.height == 0


def test_unparseable_answer_real_rows(sources):
    math = sources["math_train"]
    # 4675's answer "\text{(E)}," is an option letter with a stray comma; the others are
    # numbers, fractions, tuples, intervals, matrices, text and dollar amounts
    picked = [4675, 0, 3088, 265, 3431, 4125, 1036, 5555]
    result = unparseable_answer(math[picked])
    assert flagged_ids(result.dropped) == ids("math_train", [4675])
    assert result.dropped["evidence"].to_list() == ["no expression"]


def test_unparseable_answer_synthetic_and_blank():
    df = _prompts(
        ["Find x."] * 6, ["\\frac{3}{", "x^2+", "???", "", None, "\\$1,\\!657"], "answers"
    )
    result = unparseable_answer(df)
    # blank answers are missing_answer's business, not this rule's
    assert sorted(result.dropped["id"]) == ["answers-0", "answers-1", "answers-2"]


def test_simple_answer_fast_path_agrees_with_math_verify(sources):
    answers = sorted(
        {a for a in sources["math_train"]["answer"].drop_nulls() if _SIMPLE_ANSWER.match(a)}
    )
    assert len(answers) > 500
    non_plain = [a for a in answers if not a.strip().lstrip("-").replace(".", "").isdigit()]
    sample = non_plain[:: max(1, len(non_plain) // 40)] + answers[:: len(answers) // 10]
    from math_verify import parse

    for answer in sample:
        parsed = parse(f"\\boxed{{{answer}}}")
        assert any(not isinstance(p, str) for p in parsed), answer
    assert answer_parse_error("\\frac{7}{12}") is None


# -- the combined step ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(sources) -> pl.DataFrame:
    picks = {
        "math_train": [2164, 265, 622, 886, 4675, 0, 1, 2, 1864],
        "aime_1983_2023": [35, 166, 0, 1],
        "openmath_aops_threads": [0, 9],
        "gsm8k_train": [4717, 3950],
    }
    return pl.concat([sources[name][idx] for name, idx in picks.items()])


def test_filter_math_rl_prompts_records_reason_and_all_flags(mixed):
    result = filter_math_rl_prompts(mixed)
    assert result.kept.columns == mixed.columns
    assert result.kept.height + result.dropped.height == mixed.height
    assert not set(result.kept["id"]) & set(result.dropped["id"])
    reasons = dict(zip(result.dropped["id"], result.dropped["reason"], strict=True))
    assert reasons == {
        "math_train-2164": "multiple_choice",
        "math_train-265": "multiple_choice",
        "math_train-622": "figure_reference",
        "math_train-886": "missing_answer",
        "math_train-4675": "unparseable_answer",
        "aime_1983_2023-35": "figure_reference",
        # no answer comes first in rule order; the thread is also a proof
        "openmath_aops_threads-0": "missing_answer",
        "openmath_aops_threads-9": "missing_answer",
    }
    flagged = dict(zip(result.dropped["id"], result.dropped["flagged_by"].to_list(), strict=True))
    assert flagged["openmath_aops_threads-0"] == ["missing_answer", "proof"]
    assert flagged["openmath_aops_threads-9"] == ["missing_answer", "multi_question"]
    # 4675 lists options "A. even", "B. divisible by ..." and answers "\text{(E)},"
    assert flagged["math_train-4675"] == ["unparseable_answer", "multiple_choice"]
    stats = result.stats
    assert stats["rows_in"] == mixed.height and stats["rows_out"] == result.kept.height
    assert stats["flags"]["proof"] == 1 and stats["flags"]["missing_answer"] == 3
    assert sum(stats["drops"].values()) == result.dropped.height


def test_rule_order_decides_the_reason(mixed):
    order = ["proof", "multi_question", "missing_answer"]
    result = filter_math_rl_prompts(mixed, order)
    reasons = dict(zip(result.dropped["id"], result.dropped["reason"], strict=True))
    assert reasons["openmath_aops_threads-0"] == "proof"
    assert reasons["openmath_aops_threads-9"] == "multi_question"
    assert reasons["math_train-886"] == "missing_answer"


def test_dropped_rows_become_drops_with_evidence(mixed):
    result = filter_math_rl_prompts(mixed)
    drops = drop_rows(result.dropped, input_columns=mixed.columns, step="filters", key="id")
    assert drops.height == result.dropped.height
    detail = {row["uid"]: json.loads(row["detail"]) for row in drops.iter_rows(named=True)}
    assert detail["math_train-622"]["evidence"] == "shown in red"
    assert detail["math_train-2164"]["flagged_by"] == ["multiple_choice"]


def test_measure_rules_keeps_every_measurement(mixed):
    measured = measure_rules(mixed)
    for name in DEFAULT_RULES:
        assert measured[name].dtype == pl.Boolean
    for column in (
        "mcq_evidence",
        "figure_evidence",
        "inline_figure",
        "question_count",
        "ascii_letter_ratio",
        "foreign_word_share",
        "answer_parse_error",
    ):
        assert column in measured.columns
    assert measured.height == mixed.height
    assert measured.filter(pl.col("id") == "aime_1983_2023-166")["inline_figure"].to_list() == [
        False
    ]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown filter rule 'nope'"):
        apply_rule(_prompts(["x"], ["1"], "s"), "nope")
    with pytest.raises(ValueError, match="'answer' column"):
        filter_math_rl_prompts(pl.DataFrame({"id": ["a"], "problem": ["x"]}))
    nulls = _prompts(["ok", "ok"], ["1", "2"], "s").with_columns(
        pl.Series("problem", ["ok", None], dtype=pl.String)
    )
    with pytest.raises(ValueError, match=r"row 1 \(id s-1\) has a null problem"):
        filter_math_rl_prompts(nulls)
    with pytest.raises(ValueError, match="params given for rules not applied"):
        filter_math_rl_prompts(_prompts(["x"], ["1"], "s"), ["proof"], {"non_english": {}})


def test_every_rule_is_documented():
    for name, rule in RULES.items():
        assert rule.name == name and rule.description and rule.measure.__doc__
