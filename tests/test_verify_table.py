"""verify_frame on inputs as users have them: per-row objects or JSON text whose shapes differ
between rows, references given as one dict per row, and one clear error when a whole field is
unusable."""

from __future__ import annotations

import json

import polars as pl
import pytest

from curation.verify.table import verify_frame

PROGRAM = "```python\nclass Solution:\n    def double(self, x):\n        return 2 * x\n"
PROGRAM += "\nimport sys\nfor line in sys.stdin.read().split():\n    print(2 * int(line))\n```"
FUNCTIONAL = {
    "functional": "def check(candidate):\n    assert candidate(3) == 6\ncheck(Solution().double)"
}
STDIO = [{"input": "4\n", "output": "8\n"}, {"input": "5\n", "output": "10\n"}]
HUMANEVAL = {"test": "def check(candidate):\n    assert candidate(1) == 2", "entry_point": "f"}

PLACEHOLDERS = ("detectable_content:number_placeholders", {"num_placeholders": 2})
POSTSCRIPT = ("detectable_content:postscript", {"postscript_marker": "P.S."})
CAPITALS = (
    "change_case:capital_word_frequency",
    {"capital_frequency": 2, "capital_relation": "at least"},
)
LETTER = "Dear [name], meet me at [address].\n\nP.S. See you soon."


def _objects(name: str, values: list) -> pl.Series:
    """A column holding each row's value as the Python object it is (shapes may differ)."""
    return pl.Series(name, values, dtype=pl.Object)


def test_code_tests_of_different_shapes_in_one_table() -> None:
    tests = [FUNCTIONAL, STDIO, json.dumps(STDIO), json.dumps(FUNCTIONAL)]
    df = pl.DataFrame({"response": [PROGRAM] * 4}).with_columns(_objects("tests", tests))
    out = verify_frame(df, "code")
    assert out["passed"].to_list() == [True, True, True, True], out["detail"].to_list()
    assert out["tests"].to_list() == tests  # the input column is what it was
    humaneval = pl.DataFrame({"response": ["```python\ndef f(x):\n    return 2 * x\n```"]})
    passed = verify_frame(humaneval.with_columns(_objects("tests", [HUMANEVAL])), "code")
    assert passed["passed"].to_list() == [True]


def test_ifeval_kwargs_with_different_keys_as_objects_or_json_text() -> None:
    ids = [
        [PLACEHOLDERS[0], POSTSCRIPT[0]],
        json.dumps([CAPITALS[0]]),
        [POSTSCRIPT[0]],
    ]
    kwargs = [
        [PLACEHOLDERS[1], POSTSCRIPT[1]],
        json.dumps([CAPITALS[1]]),
        [{"postscript_marker": "P.S.", "num_placeholders": None}],  # a null key is ignored
    ]
    df = pl.DataFrame({"response": [LETTER, "We MUST act NOW.", "No postscript here."]})
    df = df.with_columns(_objects("instruction_id_list", ids), _objects("kwargs", kwargs))
    out = verify_frame(df, "if")
    assert out["passed"].to_list() == [True, True, False], out["detail"].to_list()
    # no column gains or loses keys: every kwargs dict comes back exactly as it went in
    assert out["kwargs"].to_list() == kwargs
    assert out.columns == [*df.columns, "passed", "score", "detail"]


def test_a_reference_column_of_dicts_holding_ids_and_kwargs() -> None:
    references = [
        {"instruction_id_list": [PLACEHOLDERS[0]], "kwargs": [PLACEHOLDERS[1]]},
        json.dumps({"instruction_id_list": [CAPITALS[0]], "kwargs": [CAPITALS[1]]}),
    ]
    df = pl.DataFrame({"response": [LETTER, "we must act now"]})
    out = verify_frame(df.with_columns(_objects("ref", references)), "if", reference_field="ref")
    assert out["passed"].to_list() == [True, False]
    assert out["detail"][1] == f"not followed: {CAPITALS[0]}"


def test_a_field_unusable_in_every_row_is_one_clear_error() -> None:
    df = pl.DataFrame(
        {
            "response": [LETTER, LETTER],
            "instruction_id_list": [[PLACEHOLDERS[0], POSTSCRIPT[0]]] * 2,
            "kwargs": [json.dumps([PLACEHOLDERS[1], POSTSCRIPT[1], {}])] * 2,
        }
    )
    with pytest.raises(ValueError, match=r"field 'kwargs' .* any of the 2 rows .* 2 instruction"):
        verify_frame(df, "if")
    tests = pl.DataFrame({"response": [PROGRAM] * 3, "tests": ["not tests", "[1, 2]", "{}"]})
    with pytest.raises(ValueError, match=r"^field 'tests' cannot be used in any of the 3 rows"):
        verify_frame(tests, "code")
    # one usable row: the others are undecided, with their reason, and nothing is raised
    mixed = tests.with_columns(pl.Series("tests", [json.dumps(STDIO), "[1, 2]", "{}"]))
    out = verify_frame(mixed, "code")
    assert out["passed"].to_list() == [True, None, None]
    assert out["detail"][1].startswith("unusable tests: test 0 is not")
