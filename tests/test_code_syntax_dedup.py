"""Syntax dedup of programs: renamed, re-commented and re-formatted copies are one."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from curation.code.syntax_dedup import dedup_by_syntax, normalized_tokens, syntax_fingerprint
from lake.files import json_lines

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

PY = """def total(values):
    s = 0
    for v in values:
        s += v * 2
    return s
"""
PY_RENAMED = """def acc(xs):  # sum twice each
    '''Docstring.'''
    result=0
    for item in xs:   result += item*3
    return result
"""
PY_OTHER_FLOW = """def total(values):
    s = 0
    for v in values:
        s += s * 2
    return s
"""
PY_OTHER_BLOCK = """def total(values):
    s = 0
    for v in values:
        s += v * 2
        return s
"""
CPP = "int f(int a) { int b = a + 1; /* c */ return b; }"
CPP_RENAMED = "int g(int x){\n  // add\n  int y=x+7;\n  return y;\n}"
CPP_OTHER = "int f(int a) { int b = a - 1; return b; }"
JAVA = 'class A { String f(int n) { return "n=" + n; } }'
JAVA_RENAMED = 'class B {\n  // x\n  String g(int k) { return "k: " + k; }\n}'
JAVA_OTHER = 'class A { String f(int n) { return n + "n="; } }'


@pytest.mark.parametrize(
    ("language", "code", "twin", "other"),
    [
        ("python", PY, PY_RENAMED, PY_OTHER_FLOW),
        ("python", PY, PY_RENAMED, PY_OTHER_BLOCK),
        ("cpp", CPP, CPP_RENAMED, CPP_OTHER),
        ("java", JAVA, JAVA_RENAMED, JAVA_OTHER),
    ],
)
def test_renamed_copy_matches_and_changed_program_does_not(
    language: str, code: str, twin: str, other: str
) -> None:
    assert syntax_fingerprint(code, language) == syntax_fingerprint(twin, language)
    assert syntax_fingerprint(code, language)[0] != syntax_fingerprint(other, language)[0]


def test_tokens_keep_structure_and_drop_names_literals_comments() -> None:
    tokens = normalized_tokens("x = 'a'  # c\n", "python")
    assert "v0" in tokens and "STR" in tokens
    assert not any(t == "a" or "#" in t for t in tokens)


def respond(code: str, tag: str = "python") -> str:
    return f"<think>plan ```{tag}\nprint('draft')\n```</think>Here:\n```{tag}\n{code}```\n"


def test_step_drops_later_clones_within_a_prompt_naming_the_kept_twin() -> None:
    df = pl.DataFrame(
        {
            "id": ["r1", "r2", "r3", "r4", "r5", "r6"],
            "prompt_id": ["p", "p", "p", "q", "q", "q"],
            "response": [
                respond(PY),
                respond(PY_OTHER_FLOW),
                respond(PY_RENAMED),  # clone of r1 in prompt p
                respond(PY),  # same program, other prompt: kept
                "no code at all",
                respond(CPP_RENAMED, "cpp"),
            ],
        }
    )
    result = dedup_by_syntax(df)
    assert result.kept["id"].to_list() == ["r1", "r2", "r4", "r5", "r6"]
    dropped = result.dropped.row(0, named=True)
    assert (dropped["id"], dropped["reason"], dropped["duplicate_of"]) == (
        "r3",
        "syntax_duplicate",
        "r1",
    )
    assert result.kept["syntax_language"].to_list() == ["python", "python", "python", None, "cpp"]
    assert result.kept["syntax_fingerprint"][3] is None
    across = dedup_by_syntax(df, group_column=None)
    assert across.dropped["id"].to_list() == ["r3", "r4"]  # r4 now clones r1 too


def test_leetcode_reference_solutions_hold_renamed_copies() -> None:
    rows = [r for _, r in json_lines(DATA / "sources" / "leetcode_train.jsonl")]
    df = pl.DataFrame(
        {"id": [str(i) for i in range(len(rows))], "code": [r["solutions"] for r in rows]}
    )
    result = dedup_by_syntax(df, code_column="code", extract=False, group_column=None)
    pairs = {(int(a), int(b)) for a, b in result.dropped.select("id", "duplicate_of").iter_rows()}
    name = {i: rows[i]["solutions"].split("def ")[1].split("(")[0] for i in range(len(rows))}
    named = {(name[a], name[b]) for a, b in pairs}
    # LeetCode 1081 = 316 and 1296 = 846: the same solution under other names
    assert ("smallestSubsequence", "removeDuplicateLetters") in named
    assert ("isPossibleDivide", "isNStraightHand") in named
    assert result.dropped.height == 11
    renamed = sum(rows[a]["solutions"] != rows[b]["solutions"] for a, b in pairs)
    assert renamed == 10  # one pair is a verbatim copy (N-Queens and its LCCI twin)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="no column 'response'"):
        dedup_by_syntax(pl.DataFrame({"id": ["a"]}))
    with pytest.raises(ValueError, match="no grammar for 'rust'"):
        dedup_by_syntax(
            pl.DataFrame({"id": ["a"], "response": ["x"]}),
            group_column=None,
            extract=False,
            language="rust",
        )
