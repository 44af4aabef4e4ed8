"""Decontamination: normalization, both rules on planted and real copies, measurement columns."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from curation.decontaminate import (
    LAYOUT_COMMANDS,
    BenchmarkIndex,
    build_stock_ngrams,
    decide,
    decontaminate,
    ngram_text,
    rule_named,
    tokenize,
)
from curation.decontaminate.benchmarks import Benchmark, load_benchmarks

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MEASURES = [
    "decontam_hits",
    "decontam_informative_hits",
    "decontam_coverage",
    "decontam_item_tokens",
    "decontam_end_quote",
]


@pytest.fixture(scope="module")
def math_benchmarks() -> list[Benchmark]:
    """The sets the issue reports against: AIME 24/25, AMC and MATH-500."""
    return load_benchmarks(
        "aime24,aime25,amc,math500", local_dir=SHARED / "benchmarks", allow_hub=False
    )


@pytest.fixture(scope="module")
def index(math_benchmarks: list[Benchmark]) -> BenchmarkIndex:
    return BenchmarkIndex.build(math_benchmarks)


def _source(name: str) -> pl.DataFrame:
    return pl.read_ndjson(SHARED / "sources" / f"{name}.jsonl").with_row_index("line")


# --------------------------------------------------------------------------- normalization
@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Find $ x + y $ if $x=2$.", "find $x+y$ if $ x = 2 $."),
        (r"Compute $\dfrac{1}{2}$.", r"compute $\frac{1}{2}$"),
        (r"$\left( 3, \frac{\pi}{2} \right)$", r"$(3,\frac{\pi}{2})$"),
        (r"An investment of $\$24,\!000$", "AN INVESTMENT OF $24,000"),
        ('Find it.  [asy] label("A", A, N); [/asy] Done', "Find it. Done"),
        ("Janet’s ducks – lay 16 eggs", "janet s ducks lay 16 eggs"),
    ],
)
def test_normalization_makes_surface_variants_equal(a: str, b: str) -> None:
    assert ngram_text(a) == ngram_text(b)


def test_normalized_text_keeps_words_numbers_and_non_ascii_letters() -> None:
    assert ngram_text(r"Le théorème: $x^2 \geq 0$, 3.5 cm") == "le théorème x 2 geq 0 3 5 cm"
    assert ngram_text("") == ""
    assert ngram_text("?!") == ""


# The normalization rules spelled as plain regexes over one text: the specification that the
# vectorized tokenizer (one buffer for many texts, no per-text Python) must match.
_FIGURE = re.compile(r"(?s:\[asy\].*?\[/asy\])")
_THOUSANDS = re.compile(r"(?<=[0-9]),(?:\\!)?(?=[0-9]{3}(?![^\W_]))")
_LAYOUT = re.compile(r"\\(?:" + "|".join(LAYOUT_COMMANDS) + r")(?![^\W_])")
_FOLDED = re.compile(r"\\[dt](frac|binom)(?![^\W_])")


def _spec_normalize(text: str) -> str:
    text = _THOUSANDS.sub("", _FIGURE.sub(" ", text.lower()))
    return " ".join(re.findall(r"[^\W_]+", _FOLDED.sub(r"\\\1", _LAYOUT.sub(" ", text))))


EDGE_CASES = [
    r"$\LEFT( x \Right)$ \Bigl[ \bigg) \leftarrow \textstylex \text_x \textbf{b}\mathrm{d}",
    r"\displaystyle\operatorname{lcm} \displaystyles \operatornamex \\left \\\dfrac12 \tbinom",
    "1,000,000 1,2345 12,34 1,000x 1,000_ 1,\\!000 2,\\!00 9,\\!000,\\!000 ,000 5,",
    "a[asy]b[asy]c[/asy]d[/asy]e [asy] never closed [/ASY] [ASY]x[/ASY]y",
    "text ends in 5",
    ",000 starts with a separator group",
    "ends with an open figure [asy] draw",
    "[/asy] closes in the next text",
    "ΟΔΟΣ İstanbul Straße naïve ½ x² ① – — … ’",
    "",
    "?!",
]


def test_vectorized_tokenizer_matches_the_rules_spelled_as_regexes() -> None:
    texts = EDGE_CASES[:]
    for name in ("math_train", "aime_1983_2023", "gsm8k_train"):
        frame = _source(name)
        texts += frame.get_column("problem" if "problem" in frame.columns else "question").to_list()
    tokens = tokenize(pl.Series(texts + [None], dtype=pl.String))
    for row, text in enumerate(texts):
        first, last = int(tokens.offsets[row]), int(tokens.offsets[row + 1])
        assert tokens.window_text(first, last - first) == _spec_normalize(text), text
    assert tokens.offsets[-1] == tokens.offsets[-2]  # a null is an empty text


def test_tokens_compare_exactly_even_when_hashes_collide() -> None:
    a = tokenize(pl.Series(["supercalifragilistic ab"]))
    b = tokenize(pl.Series(["supercalifragilistik ab"]))
    b.values[:] = a.values  # pretend every token hash collided
    same = a.equal(np.array([0, 1]), b, np.array([0, 1]))
    assert same.tolist() == [False, True]  # the long tokens differ in byte 20


# --------------------------------------------------------------------------- planted copies
def _planted_rows(item: str) -> dict[str, str]:
    words = item.split()
    return {
        "verbatim": item,
        "respaced": item.replace(" ", "   ").replace("$", " $ "),
        "prefixed": "Solve the following problem and box the answer.\n\n" + item,
        "embedded": "Warm-up: what is 2 + 2?\n\nMain task: " + item + "\n\nShow all work.",
        "half": "Here is a problem I found. " + " ".join(words[: len(words) // 2 + 1]),
    }


@pytest.mark.parametrize("rule", ["literal", "boilerplate-aware"])
def test_every_kind_of_planted_copy_is_dropped_and_clean_rows_kept(
    index: BenchmarkIndex, math_benchmarks: list[Benchmark], rule: str
) -> None:
    aime25 = next(b for b in math_benchmarks if b.name == "aime25")
    item, item_id = aime25.texts[4], aime25.ids[4]  # 88 words, no stock phrase
    clean = _source("gsm8k_train").head(200).select(problem=pl.col("question"))
    planted = pl.DataFrame(
        {"problem": list(_planted_rows(item).values()), "kind": list(_planted_rows(item))}
    )
    df = pl.concat([clean.with_columns(kind=pl.lit(None, pl.String)), planted])
    result = decontaminate(df, index, rule=rule, workers=1)
    dropped = result.dropped.sort("kind")
    assert dropped["kind"].to_list() == sorted(_planted_rows(item))
    assert set(dropped["benchmark"]) == {"aime25"}
    assert set(dropped["benchmark_id"]) == {item_id}
    assert set(dropped["reason"]) == {"contaminated"}
    for row in dropped.iter_rows(named=True):  # the recorded n-gram is really shared
        assert len(row["ngram"].split()) == 9
        assert f" {row['ngram']} " in f" {ngram_text(row['problem'])} "
        assert f" {row['ngram']} " in f" {ngram_text(item)} "
    coverage = dict(zip(dropped["kind"], dropped["decontam_coverage"], strict=True))
    assert coverage["verbatim"] == coverage["embedded"] == 1.0
    assert 0.4 < coverage["half"] < 0.6
    assert result.kept.height == 200
    assert result.stats["rows_in"] == 205 and result.stats["dropped"] == 5


def test_one_shared_nine_gram_is_literal_contamination_only(
    index: BenchmarkIndex, math_benchmarks: list[Benchmark]
) -> None:
    # Nine consecutive words of MATH-500 test/algebra/1332 (Daniel's electronics store).
    row = "Bob thinks daniel works at an electronics store and he claims things, but no."
    df = pl.DataFrame({"problem": [row]})
    literal = decontaminate(df, index, rule="literal", workers=1)
    aware = decontaminate(df, index, workers=1)
    assert literal.dropped["benchmark_id"].to_list() == ["test/algebra/1332.json"]
    assert literal.dropped["ngram"].to_list() == [
        "daniel works at an electronics store and he claims"
    ]
    assert aware.dropped.height == 0
    math500 = next(b for b in math_benchmarks if b.name == "math500")
    item = math500.texts[math500.ids.index("test/algebra/1332.json")]
    item_ngrams = len(ngram_text(item).split()) - 8  # its 9-grams are all distinct
    assert aware.kept.select(MEASURES[:3]).row(0) == (1, 1, pytest.approx(1 / item_ngrams))
    five_words = pl.DataFrame({"problem": ["daniel works at an electronics store"]})
    shorter = decontaminate(five_words, math_benchmarks, n=5, rule="literal", workers=1)
    assert shorter.dropped["benchmark_id"].to_list() == ["test/algebra/1332.json"]
    assert decontaminate(five_words, index, rule="literal", workers=1).dropped.height == 0


def test_items_shorter_than_n_match_as_whole_strings_at_token_boundaries() -> None:
    bench = Benchmark("tiny", ["t1"], [r"Compute $\dbinom{31}{28}$."], origin="test")
    df = pl.DataFrame(
        {
            "problem": [
                r"First, compute $\binom{31}{28}$ and then add 1.",  # contains the item
                r"Compute $\dbinom{31}{2}$.",  # a different problem
                r"Compute $\dbinom{31}{280}$.",  # 280 is not the token 28
            ]
        }
    )
    result = decontaminate(df, [bench], workers=1)
    assert result.dropped["problem"].to_list() == [df["problem"][0]]
    assert result.dropped["ngram"].to_list() == ["compute binom 31 28"]
    assert result.dropped["decontam_coverage"].to_list() == [1.0]


_FIGURE_CODE = re.compile(r"(?s:\[asy\].*?\[/asy\])")


@pytest.mark.parametrize("cut", ["tokens", "words"])
@pytest.mark.parametrize("half", ["second", "first"])
def test_half_quotes_are_caught_at_every_item_length(
    index: BenchmarkIndex, math_benchmarks: list[Benchmark], half: str, cut: str
) -> None:
    """Every AIME / AMC / MATH-500 item quoted by one half, after a real problem.

    `tokens` halves the item's normalized words; `words` halves its raw words (figure code
    left out), as a person would, so a half holds 35-50% of the tokens when the other half is
    mostly LaTeX. Rates count the quotes that hold at least one n-gram (n = 9 tokens): items
    shorter than 2n, and word halves shorter than n, are invisible to any n-gram rule.
    Before the end-quote threshold, no half of an 18-24 token item was caught (5 hits needed).
    """
    rng = random.Random(11)
    fillers = _source("gsm8k_train").get_column("question").to_list()
    rows = []
    for bench in math_benchmarks:
        for item_id, item in zip(bench.ids, bench.texts, strict=True):
            tokens = ngram_text(item).split()
            words = tokens if cut == "tokens" else _FIGURE_CODE.sub(" ", item).split()
            middle = len(words) // 2
            quote = " ".join(words[middle:] if half == "second" else words[: len(words) - middle])
            rows.append(
                {
                    "problem": rng.choice(fillers) + " " + quote,
                    "item": f"{bench.name}/{item_id}",
                    "tokens": len(tokens),
                    "quoted": len(ngram_text(quote).split()),
                }
            )
    df = pl.DataFrame(rows)
    result = decontaminate(df, index, workers=2)
    caught = result.dropped.select(
        "item", found=pl.concat_str("benchmark", "benchmark_id", separator="/")
    )
    assert (caught["item"] == caught["found"]).all()  # each row is caught for its own item
    df = df.with_columns(caught=pl.col("item").is_in(caught["item"].implode()))
    visible = df.filter(pl.col("quoted") >= 9)
    buckets = [18, 20, 25, 30, 40, 60, 10_000]
    rates = {}
    for low, high in zip(buckets, buckets[1:], strict=False):
        part = visible.filter(pl.col("tokens").is_between(low, high, closed="left"))
        rates[f"{low}-{high}"] = (part.height, round(part["caught"].mean(), 3))
    print(f"{half} half by {cut}: (quotes, caught) per item length in tokens:", rates)
    # Measured, from 18-20 tokens up: second halves by tokens 1.0 / 0.987 / 1.0 / 1.0 / 1.0 /
    # 1.0, by words 1.0 / 1.0 / 1.0 / 0.982 / 1.0 / 1.0; first halves by tokens 1.0 / 0.987 /
    # 0.986 / 1.0 / 1.0 / 1.0, by words 1.0 / 0.971 / 0.946 / 0.973 / 1.0 / 1.0 (a first half
    # often opens with a stock phrase, "let x y and z be positive real numbers such that",
    # whose n-grams do not count).
    floor = 0.9 if (half, cut) == ("first", "words") else 0.95
    assert all(rate >= floor for _, rate in rates.values()), rates


def test_a_phrase_from_the_middle_of_a_short_item_or_a_list_of_numbers_is_not_a_quote(
    index: BenchmarkIndex,
) -> None:
    """Two AIME problems that a plain relative threshold (9% of an item's n-grams) flags."""
    df = _source("aime_1983_2023").filter(pl.col("line").is_in([321, 577]))
    result = decontaminate(df, index, workers=1)
    assert result.dropped.height == 0
    kept = {r["line"]: r for r in result.kept.iter_rows(named=True)}
    # 321 shares "to the right of the decimal point in the" from the middle of MATH-500
    # number_theory/255 (2 hits of 13): no end of the item, so min_hits applies
    assert kept[321]["decontam_informative_hits"] == 2 and not kept[321]["decontam_end_quote"]
    # 577 shares "1 2 3 ... 12" with the end of number_theory/239: numbers only
    assert kept[577]["decontam_end_quote"] and kept[577]["decontam_informative_hits"] == 0


# --------------------------------------------------------------------------- real data
def test_aime_1983_2023_against_aime_amc_math500(index: BenchmarkIndex) -> None:
    """Counts measured on the shared files (bench/README.md, Decontamination has the by-eye review).

    Literal: 312 of 975 AIME problems share a 9-gram, nearly all stock phrases ("where m and
    n are relatively prime positive integers"). Boilerplate-aware: 12, of which 10 are true
    copies: AIME problems that MATH-500 reuses verbatim or nearly.
    """
    df = _source("aime_1983_2023")
    literal = decontaminate(df, index, rule="literal", workers=2)
    aware = decontaminate(df, index, workers=2)
    assert (literal.dropped.height, aware.dropped.height) == (312, 12)
    assert set(aware.dropped["line"]) <= set(literal.dropped["line"])
    by_line = {r["line"]: r for r in aware.dropped.iter_rows(named=True)}
    # Known copy: AIME 1983 #2 is MATH-500 test/intermediate_algebra/1365, word for word.
    assert by_line[1]["benchmark_id"] == "test/intermediate_algebra/1365.json"
    assert by_line[1]["decontam_coverage"] == 1.0
    # Known stock-phrase pairs: flagged by the literal rule only.
    lit = {r["line"]: r for r in literal.dropped.iter_rows(named=True)}
    assert lit[357]["ngram"] == "find the remainder when n is divided by 1000"  # AIME 2003 #13
    assert lit[600]["ngram"] == "where m and n are relatively prime positive integers"
    assert 357 not in by_line and 600 not in by_line
    kept = aware.kept.filter(pl.col("line").is_in([357, 600]))
    assert kept["decontam_informative_hits"].to_list() == [0, 0]  # both phrases are stock


def test_math_train_against_math500_and_aime_amc(index: BenchmarkIndex) -> None:
    """MATH train vs MATH-500 + AIME/AMC: 580 literal overlaps, 87 boilerplate-aware.

    No MATH train row covers 90% of a test item; the 87 are near-copies (same template, other
    numbers or question, e.g. the "Five points A, B, C, D and O lie on a flat field" item)
    plus a few long shared phrases; see bench/README.md, Decontamination.
    """
    df = _source("math_train")
    literal = decontaminate(df, index, rule="literal", workers=2)
    aware = decontaminate(df, index, workers=2)
    assert (literal.dropped.height, aware.dropped.height) == (580, 87)
    # 18 of them quote one end of a short MATH-500 item (read by eye): 12 template siblings
    # (the same sentence, other numbers: "How many ways are there to put 5 balls in 3 boxes
    # if ..." vs "... in 2 boxes"), 6 share a generic opening or ending of a short item ("of
    # x express your answer as an improper fraction"); bench/README.md, Decontamination
    end_quotes = aware.dropped.filter(pl.col("decontam_informative_hits") < 5)
    assert end_quotes.height == 18 and end_quotes["decontam_end_quote"].all()
    assert literal.stats["dropped_by_benchmark"] == {
        "aime24": 27,
        "aime25": 94,
        "amc": 53,
        "math500": 406,
    }
    assert aware.dropped["decontam_coverage"].max() < 0.9
    five = aware.dropped.filter(pl.col("problem").str.starts_with("Five points $A$, $B$"))
    assert five["benchmark_id"].to_list() == ["test/geometry/702.json"]
    # a stock phrase that MATH train shares with MATH-500 items is not enough by itself
    stock = "express your answer as a decimal to the nearest"
    phrase_only = literal.dropped.filter(pl.col("ngram") == stock)["line"]
    assert phrase_only.len() == 51
    assert not set(phrase_only) & set(aware.dropped["line"])


# --------------------------------------------------------------------------- measurement
def test_measurements_are_kept_apart_from_the_decision(index: BenchmarkIndex) -> None:
    df = _source("aime_1983_2023")
    result = decontaminate(df, index, workers=1)
    assert set(MEASURES) <= set(result.kept.columns)
    measured = pl.concat(
        [result.kept.select("line", *MEASURES), result.dropped.select("line", *MEASURES)]
    )
    for overrides in ({"min_hits": 8}, {"min_hits": 3, "min_coverage": 0.5}):
        rule = rule_named("boilerplate-aware", **overrides)
        rerun = decontaminate(df, index, rule=rule, workers=1)
        redecided = decide(measured, rule).filter(pl.col("contaminated"))
        assert sorted(redecided["line"]) == sorted(rerun.dropped["line"])


def test_dropped_rows_carry_their_detail(index: BenchmarkIndex) -> None:
    """What the runner packs into a drop's JSON detail: every column beyond the input's."""
    df = _source("aime_1983_2023").with_columns(id=pl.col("line").cast(pl.String))
    result = decontaminate(df, index, workers=1)
    detail = set(result.dropped.columns) - set(df.columns)
    assert {"reason", "benchmark", "benchmark_id", "ngram", "decontam_coverage", "rule"} <= detail
    assert (
        result.dropped.select(pl.col("benchmark", "benchmark_id", "ngram").null_count())
        .sum_horizontal()
        .item()
        == 0
    )


@pytest.mark.parametrize("rule", ["literal", "boilerplate-aware"])
def test_workers_and_chunks_do_not_change_the_result(index: BenchmarkIndex, rule: str) -> None:
    # The boilerplate-aware rule counts n-gram document frequency over the whole input, so
    # chunks must combine their counts; AIME rows hold most of the stock phrases.
    df = pl.concat([_source("aime_1983_2023"), _source("math_train").head(2000)], how="diagonal")
    df = df.with_columns(pl.int_range(pl.len()).alias("line"))
    one = decontaminate(df, index, rule=rule, workers=1, chunk_rows=1_000_000)
    many = decontaminate(df, index, rule=rule, workers=2, chunk_rows=37)
    assert one.dropped.height > 0
    assert one.dropped.sort("line").equals(many.dropped.sort("line"))
    assert one.kept.sort("line").equals(many.kept.sort("line"))


def test_stock_phrases_from_a_reference_corpus() -> None:
    phrase = "find the remainder when n is divided by one thousand exactly"
    corpus = [f"Problem about {fruit}. {phrase}." for fruit in ("apples", "pears", "plums")]
    stock = build_stock_ngrams(corpus, n=9, min_df=3)
    assert stock.ngrams == {
        "find the remainder when n is divided by one",
        "the remainder when n is divided by one thousand",
        "remainder when n is divided by one thousand exactly",
    }
    copies = build_stock_ngrams(corpus[:1] * 5 + corpus[1:2], n=9, min_df=3)
    assert copies.ngrams == frozenset()  # identical texts count once
    item = Benchmark("b", ["b1"], [f"Let n be 7 to the power 99. {phrase}."], origin="test")
    df = pl.DataFrame({"problem": [f"Let k be 3 to the power 5. {phrase}."] * 1})
    rule = rule_named("boilerplate-aware", min_hits=1)
    assert decontaminate(df, [item], rule=rule, workers=1).dropped.height == 1
    assert decontaminate(df, [item], rule=rule, stock=stock, workers=1).dropped.height == 0


def test_bad_input_is_a_clear_error(index: BenchmarkIndex) -> None:
    with pytest.raises(ValueError, match="no column 'problem'"):
        decontaminate(pl.DataFrame({"question": ["x"]}), index)
    with pytest.raises(ValueError, match="column 'problem' is Int64, expected strings"):
        decontaminate(pl.DataFrame({"problem": [1]}), index)
    with pytest.raises(ValueError, match="built for n=9, asked for n=5"):
        decontaminate(pl.DataFrame({"problem": ["x"]}), index, n=5)
    with pytest.raises(ValueError, match="unknown decontamination rule 'strict'"):
        decontaminate(pl.DataFrame({"problem": ["x"]}), index, rule="strict")


def test_empty_and_null_rows(index: BenchmarkIndex) -> None:
    empty = decontaminate(pl.DataFrame({"problem": []}, schema={"problem": pl.String}), index)
    assert empty.kept.height == 0 and empty.dropped.height == 0
    nulls = decontaminate(pl.DataFrame({"problem": [None, "", "hello"]}), index, workers=1)
    assert nulls.kept.height == 3
    assert nulls.kept["decontam_hits"].to_list() == [0, 0, 0]


def test_a_second_pass_replaces_the_first_pass_measurements(index: BenchmarkIndex) -> None:
    df = _source("aime_1983_2023")
    first = decontaminate(df, index, rule="literal", workers=1)
    again = decontaminate(first.kept, index, rule="literal", workers=1)
    assert again.dropped.height == 0
    assert again.kept.columns == first.kept.columns
    assert again.kept.equals(first.kept)


def test_the_step_scope_follows_the_rule(index: BenchmarkIndex) -> None:
    """Boilerplate-aware counts stock n-grams over every row, so its step is table-wide:
    run block by block, AIME's shared phrases fall below `min_df` in each block and 12 drops
    become dozens. The literal rule decides each row alone: blocks change nothing."""
    from curation.decontaminate.scan import decontamination_scope

    assert decontamination_scope("literal") == "rows"
    assert decontamination_scope("boilerplate-aware") == "table"
    assert decontamination_scope(rule_named("boilerplate-aware", min_hits=3)) == "table"
    df = _source("aime_1983_2023")
    for rule, whole_drops in (("literal", 312), ("boilerplate-aware", 12)):
        whole = decontaminate(df, index, rule=rule, workers=1)
        blocks = [
            decontaminate(df.slice(lo, 100), index, rule=rule, workers=1)
            for lo in range(0, df.height, 100)
        ]
        by_block = pl.concat([b.dropped for b in blocks])
        assert whole.dropped.height == whole_drops
        if decontamination_scope(rule) == "rows":
            assert by_block.equals(whole.dropped)
        else:
            assert by_block.height > 2 * whole.dropped.height
