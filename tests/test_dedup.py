"""Exact and near dedup on real problems: estimates, planted near-duplicates, template siblings."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from datasketch import MinHash
from datasketch.lsh import _optimal_param

from curation.dedup import (
    answer_key,
    exact_dedup,
    jaccard,
    minhash_signatures,
    near_dedup,
    number_hashes,
    optimal_bands,
    problem_number_hashes,
    shingle_hash32,
    shingle_set,
    shingle_text,
)

SOURCES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sources"


@pytest.fixture(scope="module")
def math_train() -> pl.DataFrame:
    df = pl.read_ndjson(SOURCES / "math_train.jsonl")
    return df.with_row_index("row").with_columns(
        ("m" + pl.col("row").cast(pl.String)).alias("id"), pl.col("answer").cast(pl.String)
    )


@pytest.fixture(scope="module")
def real_problems(math_train: pl.DataFrame) -> pl.DataFrame:
    """600 distinct real problems (MATH and GSM8K) with their answers."""
    gsm = pl.read_ndjson(SOURCES / "gsm8k_train.jsonl").select(
        pl.col("question").alias("problem"),
        pl.col("answer").str.extract(r"####\s*(.+)$").alias("answer"),
    )
    df = pl.concat([math_train.select("problem", "answer").head(2000), gsm.head(1000)])
    df = df.with_columns(shingle_text(df.get_column("problem")).alias("norm"))
    df = df.unique("norm", keep="first", maintain_order=True).drop("norm")
    return df.sample(600, seed=7)


# --------------------------------------------------------------------------- normalization


def test_normalization_removes_spacing_case_and_latex_respacing_only() -> None:
    texts = pl.Series(
        [
            "Find $x + 1$ if  $x=2$.",
            "find $ x+1 $ if $x = 2$ .",
            "FIND $x+1$\nif $x=2$.",
            r"Compute $\frac{12}{3}$.",
            r"Compute $\frac{1}{23}$.",
            r"$2 \cdot 3$",
            r"$2\cdot3$",
            "Ｆｉｎｄ Ä",
        ]
    )
    norm = shingle_text(texts).to_list()
    assert norm[0] == norm[1] == norm[2] == "find$x+1$if$x=2$."
    assert norm[3] != norm[4]
    assert norm[5] == norm[6]
    assert norm[7] == "find ä"


def test_number_hashes_tell_numbers_apart() -> None:
    norm = shingle_text(
        pl.Series(["radius of 5 cm", "radius of 10 cm", "Radius of  5 cm", "no digits", "1 23"])
    )
    h = number_hashes(norm)
    assert h[0] == h[2]
    assert h[0] != h[1]
    assert h[3] == 0
    assert number_hashes(shingle_text(pl.Series(["12 3"])))[0] != h[4]


def test_answer_key() -> None:
    got = answer_key(pl.Series([r"\dfrac{1}{2}", r"\frac {1}{2}", "$5$", " ", None]))
    assert got.to_list() == [r"\frac{1}{2}", r"\frac{1}{2}", "5", None, None]


# --------------------------------------------------------------------------- signatures


def test_classic_scheme_reproduces_datasketch_bit_for_bit(math_train: pl.DataFrame) -> None:
    texts = [*math_train.get_column("problem").head(30).to_list(), "ab", "x"]
    sig = minhash_signatures(texts, num_perm=64, scheme="classic", seed=5)
    for i, text in enumerate(texts):
        ref = MinHash(num_perm=64, seed=5, hashfunc=shingle_hash32, scheme="legacy")
        ref.update_batch(list(shingle_set(text)))
        assert np.array_equal(ref.hashvalues.astype(np.uint32), sig[i]), text


def _edited(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    for _ in range(2):
        words[rng.randrange(len(words))] = rng.choice(["the", "some", "a", "this"])
    return " ".join(words)


def test_one_permutation_estimate_tracks_exact_jaccard(math_train: pl.DataFrame) -> None:
    rng = random.Random(0)
    a = math_train.get_column("problem").head(300).to_list()
    b = [_edited(t, rng) for t in a]
    est = (minhash_signatures(a) == minhash_signatures(b)).mean(axis=1)
    exact = np.array([jaccard(shingle_set(x), shingle_set(y)) for x, y in zip(a, b, strict=True)])
    ds = []
    for x, y in zip(a[:100], b[:100], strict=True):
        mx, my = MinHash(num_perm=112), MinHash(num_perm=112)
        mx.update_batch(list(shingle_set(x)))
        my.update_batch(list(shingle_set(y)))
        ds.append(mx.jaccard(my))
    assert np.abs(est - exact).mean() < 0.05  # 112 permutations: std ~0.04 per pair
    assert abs((est - exact).mean()) < 0.02  # no bias
    assert np.abs(est[:100] - np.array(ds)).mean() < 0.07  # same error class as datasketch
    unrelated = (minhash_signatures(a[:150]) == minhash_signatures(a[150:])).mean()
    assert unrelated < 0.1


def test_signatures_do_not_depend_on_workers_or_chunking(math_train: pl.DataFrame) -> None:
    texts = pl.concat([math_train.get_column("problem")] * 3)  # 22K rows: 3 chunks
    one = minhash_signatures(texts, workers=1)
    two = minhash_signatures(texts, workers=2)
    assert np.array_equal(one, two)
    assert np.array_equal(one[12_345], minhash_signatures([texts[12_345]])[0])


def test_optimal_bands_match_datasketch() -> None:
    for threshold, num_perm in [(0.6, 112), (0.7, 112), (0.8, 128), (0.5, 64)]:
        assert optimal_bands(threshold, num_perm) == _optimal_param(threshold, num_perm, 0.5, 0.5)
    assert optimal_bands(0.6, 112) == (16, 7)


# --------------------------------------------------------------------------- exact dedup


def test_exact_dedup_prefers_a_reference_then_source_order() -> None:
    df = pl.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e"],
            "problem": ["What is $1+1$?", "what is $ 1 + 1 $ ?", "WHAT IS $1+1$?", "Other", "x"],
            "answer": [None, "2", "2", None, None],
        }
    )
    res = exact_dedup(df)
    assert res.kept.get_column("id").to_list() == ["b", "d", "e"]
    dropped = res.dropped.sort("id")
    assert dropped.get_column("id").to_list() == ["a", "c"]
    assert dropped.get_column("duplicate_of").to_list() == ["b", "b"]
    assert dropped.get_column("cluster_id").to_list() == ["exact:b", "exact:b"]
    assert dropped.get_column("cluster_size").to_list() == [3, 3]
    assert set(dropped.get_column("reason")) == {"exact_duplicate"}
    assert res.stats["rows_in"] == res.stats["rows_out"] + res.stats["dropped"]


# --------------------------------------------------------------------------- near dedup


def _perturbations(rng: random.Random) -> dict:
    def word_edit(t: str) -> str:
        swaps = {"find": "determine", "what": "which", "the": "a", "is": "equals", "of": "for"}
        words = t.split(" ")
        spots = [i for i, w in enumerate(words) if w.lower() in swaps]
        for i in rng.sample(spots, min(2, len(spots))):
            words[i] = swaps[words[i].lower()]
        return " ".join(words)

    def latex(t: str) -> str:
        return re.sub(r"\$([^$]+)\$", lambda m: "$ " + " ".join(m.group(1).split()) + " $", t)

    prefixes = ["Solve the following problem.", "Problem:", "Answer the following question."]
    suffixes = ["Show your work.", "Explain your reasoning.", "Think step by step."]
    return {
        "whitespace_case_punct": lambda t: "  ".join(t.split(" ")).upper().rstrip(".?"),
        "word_edit": word_edit,
        "latex_respace": latex,
        "prefix": lambda t: rng.choice(prefixes) + " " + t,
        "suffix": lambda t: t + " " + rng.choice(suffixes),
        "prefix_and_word_edit": lambda t: rng.choice(prefixes) + " " + word_edit(t),
    }


def test_planted_near_duplicates_of_real_problems(real_problems: pl.DataFrame) -> None:
    """Recall and precision of the defaults per perturbation kind, on short real prompts."""
    rng = random.Random(3)
    problems = real_problems.get_column("problem").to_list()
    answers = real_problems.get_column("answer").to_list()
    report = {}
    for kind, edit in _perturbations(rng).items():
        rows = [{"id": f"o{i}", "problem": p, "answer": answers[i]} for i, p in enumerate(problems)]
        planted = 0
        for i, p in enumerate(problems):
            q = edit(p)
            if q != p:
                rows.append({"id": f"c{i}", "problem": q, "answer": answers[i]})
                planted += 1
        df = pl.DataFrame(rows)
        exact = exact_dedup(df)
        near = near_dedup(exact.kept)
        dropped = pl.concat(
            [exact.dropped.select("id", "duplicate_of"), near.dropped.select("id", "duplicate_of")]
        )
        correct = sum(a[1:] == b[1:] for a, b in dropped.select("id", "duplicate_of").iter_rows())
        report[kind] = (correct / planted, correct / max(dropped.height, 1))
    print(
        "recall, precision per kind:",
        {k: (round(r, 3), round(p, 4)) for k, (r, p) in report.items()},
    )
    for kind, (recall, precision) in report.items():
        assert precision >= 0.99, kind
        exact_kinds = ("whitespace_case_punct", "latex_respace")
        bar = 0.99 if kind in exact_kinds else 0.75 if kind == "prefix_and_word_edit" else 0.9
        assert recall >= bar, kind
    # Measured: 1.0 / 0.95 / 1.0 / 0.95 / 0.967 / 0.807 (a prefix plus two edited words on
    # a one-line problem leaves a char 5-gram Jaccard near 0.5, below the 0.6 threshold).
    assert np.mean([r for r, _ in report.values()]) >= 0.9


def test_template_siblings_in_math_train_are_kept_apart(math_train: pl.DataFrame) -> None:
    """Pairs with char 5-gram Jaccard >= 0.8 but different answers are different problems."""
    from scipy import sparse

    df = math_train.head(3000)
    sets = [shingle_set(t) for t in df.get_column("problem")]
    vocab: dict[bytes, int] = {}
    rows, cols = [], []
    for i, s in enumerate(sets):
        for sh in s:
            rows.append(i)
            cols.append(vocab.setdefault(sh, len(vocab)))
    m = sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)))
    inter = (m @ m.T).tocoo()
    upper = inter.row < inter.col
    a, b, both = inter.row[upper], inter.col[upper], inter.data[upper]
    size = np.array([len(s) for s in sets])
    high = both / (size[a] + size[b] - both) >= 0.8
    a, b = a[high], b[high]
    answers = answer_key(df.get_column("answer")).to_list()
    siblings = [(int(x), int(y)) for x, y in zip(a, b, strict=True) if answers[x] != answers[y]]
    assert 50 <= len(siblings) <= 120  # 77 with this normalization

    def merged(**kw) -> int:
        res = near_dedup(df, **kw)
        cluster = dict(zip(res.kept["id"], res.kept["id"], strict=True))
        cluster |= dict(zip(res.dropped["id"], res.dropped["duplicate_of"], strict=True))
        ids = df.get_column("id").to_list()
        return sum(cluster[ids[x]] == cluster[ids[y]] for x, y in siblings)

    counts = {
        "default": merged(),
        "answer": merged(keep_apart=("answer",)),
        "numbers": merged(keep_apart=("numbers",)),
        "off": merged(keep_apart=()),
        "off@0.8": merged(keep_apart=(), threshold=0.8),
    }
    print(f"{len(siblings)} different-answer pairs with J>=0.8; merged per setting: {counts}")
    assert counts["default"] == 0
    assert counts["answer"] == 0
    assert counts["numbers"] < len(siblings) // 2
    assert counts["off"] >= 0.9 * len(siblings)
    assert counts["off@0.8"] >= 0.6 * len(siblings)


def test_numbers_keep_problems_without_answers_apart() -> None:
    df = pl.DataFrame(
        {
            "id": ["a", "b", "c"],
            "problem": [
                "A circle has a radius of 5 cm. What is the area of the circle in square cm?",
                "A circle has a radius of 10 cm. What is the area of the circle in square cm?",
                "A circle has a radius of 5 cm.  What is the area of the circle in square cm",
            ],
        }
    )
    res = near_dedup(df)
    assert res.kept.get_column("id").to_list() == ["a", "b"]
    assert res.dropped.get_column("duplicate_of").to_list() == ["a"]
    assert res.dropped.get_column("jaccard_estimate")[0] >= 0.6
    assert near_dedup(df, keep_apart=()).kept.height == 1


def test_answerless_rows_join_a_single_answered_cluster_only() -> None:
    text = "In triangle ABC shown in the figure, the side lengths are given. Find the length"
    df = pl.DataFrame(
        {
            "id": ["n1", "a1", "a2", "b1", "n2"],
            "problem": [
                text + " of BC.",
                text + " of BC!",
                text + " of  BC.",
                "Compute the sum of all positive divisors of the product of the first primes.",
                "Compute the sum of all positive divisors of the product of the first primes",
            ],
            "answer": [None, "7", "7", "12", None],
        }
    )
    res = near_dedup(df)
    dup = dict(zip(res.dropped["id"], res.dropped["duplicate_of"], strict=True))
    assert dup == {"n1": "a1", "a2": "a1", "n2": "b1"}  # the answered row represents
    assert res.stats["answerless_clusters_attached"] == 2

    sibling = df.with_columns(
        pl.when(pl.col("id") == "a2").then(pl.lit("9")).otherwise(pl.col("answer")).alias("answer")
    )
    res = near_dedup(sibling)
    kept = res.kept.get_column("id").to_list()
    assert {"n1", "a1", "a2"} <= set(kept)  # n1 matches answers 7 and 9: ambiguous, kept
    assert res.stats["answerless_clusters_ambiguous"] == 1


def test_near_dedup_is_deterministic_and_conserves_rows(real_problems: pl.DataFrame) -> None:
    df = pl.concat([real_problems, real_problems.with_columns(pl.col("problem") + " ")])
    df = df.with_row_index("i").with_columns(("r" + pl.col("i").cast(pl.String)).alias("id"))
    first, second = near_dedup(df), near_dedup(df, workers=1)
    assert first.kept.equals(second.kept)
    assert first.dropped.equals(second.dropped)
    assert first.kept.height + first.dropped.height == df.height
    assert first.kept.height == real_problems.height


@pytest.mark.parametrize("verify", ["estimate", "exact", "none"])
def test_no_rows_in_no_rows_out(verify: str) -> None:
    """A step after a filter that dropped everything gets 0 rows: empty kept and dropped
    frames with the input's columns (and the drop columns), not an error."""
    schema = {"id": pl.String, "problem": pl.String, "answer": pl.String}
    empty = pl.DataFrame(schema=schema)
    for result in (near_dedup(empty, verify=verify), exact_dedup(empty)):
        assert result.kept.schema == pl.Schema(schema)
        assert result.dropped.height == 0
        assert {"reason", "cluster_id", "duplicate_of"} <= set(result.dropped.columns)
        assert (result.stats["rows_in"], result.stats["dropped"]) == (0, 0)


def test_exact_verification_and_word_shingles(real_problems: pl.DataFrame) -> None:
    rng = random.Random(5)
    edit = _perturbations(rng)["suffix"]
    problems = real_problems.get_column("problem").head(200).to_list()
    rows = [{"id": f"o{i}", "problem": p} for i, p in enumerate(problems)]
    rows += [{"id": f"c{i}", "problem": edit(p)} for i, p in enumerate(problems)]
    df = pl.DataFrame(rows)
    exact = near_dedup(df, verify="exact")
    assert exact.dropped.height >= 190
    assert all(a[1:] == b[1:] for a, b in exact.dropped.select("id", "duplicate_of").iter_rows())
    measured = exact.dropped.get_column("jaccard_exact")
    assert measured.min() >= 0.6 - 1e-6  # suffix copies link straight to their original
    for row in exact.dropped.head(5).iter_rows(named=True):
        original = problems[int(row["duplicate_of"][1:])]
        want = jaccard(shingle_set(row["problem"]), shingle_set(original))
        assert abs(row["jaccard_exact"] - want) < 1e-6
    words = near_dedup(df, shingle="word", ngram=3)
    assert words.dropped.height > 100


def test_bad_input_errors_name_the_problem() -> None:
    df = pl.DataFrame({"id": ["a", None], "problem": ["x", "y"]})
    with pytest.raises(ValueError, match="row 1"):
        near_dedup(df)
    with pytest.raises(ValueError, match="no column 'text'"):
        exact_dedup(df, text_column="text")
    with pytest.raises(ValueError, match="exceeds num_perm"):
        near_dedup(df.drop_nulls(), bands=20, rows=8)
    with pytest.raises(ValueError, match="keep_apart"):
        near_dedup(df.drop_nulls(), keep_apart=("colour",))
    with pytest.raises(ValueError, match="ngram"):
        minhash_signatures(["abc"], ngram=9)


def test_code_problems_are_kept_apart_by_their_tests() -> None:
    """LeetCode prompts share a long instruction boilerplate; their tests tell them apart."""
    code = pl.read_ndjson(SOURCES / "leetcode_train.jsonl", infer_schema_length=None).head(300)
    copies = code.with_columns(pl.col("problem") + "\nThink step by step.")
    df = pl.concat([code, copies]).select("problem", "tests")
    df = df.with_row_index("i").with_columns(("c" + pl.col("i").cast(pl.String)).alias("id"))
    res = near_dedup(df)
    pairs = res.dropped.select("id", "duplicate_of").rows()
    correct = sum(int(a[1:]) % 300 == int(b[1:]) for a, b in pairs)
    assert correct == len(pairs) and correct >= 290
    plain = near_dedup(df, keep_apart=())
    assert plain.dropped.height > res.dropped.height  # boilerplate merges distinct problems


def _framed(text: str, rng: random.Random) -> str:
    """The problem as scraped sets carry it: a source header, a trailing id or a year."""
    year = rng.randrange(1990, 2025)
    contest = rng.choice(["AMC 10A", "AMC 12B", "AIME I", "HMMT February", "USAMO"])
    return rng.choice(
        [
            f"{year} {contest} Problem {rng.randrange(1, 26)}. {text}",
            f"{text} #{rng.randrange(10**5, 10**7)}",
            f"{text} ({year} {contest})",
            f"({year}) {text}",
            f"Problem {rng.randrange(1, 30)}: {text}",
            f"{text}\n\nSource: {contest} {year}, problem {rng.randrange(1, 26)}",
        ]
    )


def _framed_corpus(math_train: pl.DataFrame, framed_share: float) -> tuple[pl.DataFrame, int]:
    """1,000 real MATH problems and one edited copy of each; `framed_share` of all rows get a
    header, trailing id or year of their own (so a copy and its original rarely agree)."""
    rng = random.Random(17)
    df = math_train.with_columns(shingle_text(math_train.get_column("problem")).alias("norm"))
    df = df.unique("norm", keep="first", maintain_order=True).sample(1000, seed=5)
    edits = _perturbations(rng)
    kinds = ["whitespace_case_punct", "word_edit", "latex_respace", "suffix"]
    rows = []
    for i, (problem, answer) in enumerate(df.select("problem", "answer").iter_rows()):
        copy = edits[rng.choice(kinds)](problem)
        for tag, text in (("o", problem), ("c", copy)):
            if rng.random() < framed_share:
                text = _framed(text, rng)
            rows.append({"id": f"{tag}{i}", "problem": text, "answer": answer})
    return pl.DataFrame(rows), df.height


def _near_recall(corpus: pl.DataFrame, planted: int, **kw) -> float:
    exact = exact_dedup(corpus)
    near = near_dedup(exact.kept, **kw)
    dropped = pl.concat(
        [exact.dropped.select("id", "duplicate_of"), near.dropped.select("id", "duplicate_of")]
    )
    correct = sum(a[1:] == b[1:] for a, b in dropped.iter_rows())
    # MATH train states a few problems twice (same answer), so plain dedup merges those too
    assert correct >= 0.98 * dropped.height
    return correct / planted


def test_headers_trailing_ids_and_years_do_not_keep_copies_apart(
    math_train: pl.DataFrame,
) -> None:
    """Numbers outside the problem (a source header, a trailing id, a year) are not the
    problem's numbers. With half the rows framed, the numbers rule used to keep three copies
    in four apart (measured: recall 0.258 against 0.893 with keep_apart off; now 0.885;
    0.974 without framing, where framing's extra characters do not lower the Jaccard)."""
    framed, planted = _framed_corpus(math_train, framed_share=0.5)
    plain, _ = _framed_corpus(math_train, framed_share=0.0)
    recall = {
        "framed": _near_recall(framed, planted),
        "framed, keep_apart off": _near_recall(framed, planted, keep_apart=()),
        "plain": _near_recall(plain, planted),
    }
    print("recall of planted copies:", {k: round(v, 3) for k, v in recall.items()})
    assert recall["plain"] >= 0.95
    assert recall["framed"] >= 0.85
    assert recall["framed"] >= recall["framed, keep_apart off"] - 0.02


def test_framing_numbers_are_left_out_of_the_numbers_key() -> None:
    texts = pl.Series(
        [
            "A circle has a radius of 5 cm. What is its area?",
            "2019 AMC 10A Problem 5. A circle has a radius of 5 cm. What is its area?",
            "A circle has a radius of 5 cm. What is its area? #481516",
            "(2003) A circle has a radius of 5 cm. What is its area?",
            "A circle has a radius of 5 cm. What is its area? (AIME 2011 #4)",
            "Problem 12: A circle has a radius of 5 cm. What is its area?",
            "A circle has a radius of 10 cm. What is its area?",  # a sibling, not a copy
            "2019 people attend a party. Each shakes 5 hands. How many handshakes?",
            "2018 people attend a party. Each shakes 5 hands. How many handshakes?",
            "What is the remainder when 5^100 is divided by 2019",
            "What is the remainder when 5^100 is divided by 2018",
        ]
    )
    keys = problem_number_hashes(texts)
    assert len(set(keys[:6].tolist())) == 1
    assert len(set(keys[6:].tolist())) == 5  # numbers inside the problem still count
