"""Ingest of every format and every shared source, and every bad-input case."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from curation.ingest import IngestError, ingest, parse_mapping
from lake.catalog import Lake

ROWS = [
    {"problem": "What is 2+2?", "answer": 4, "level": 1, "tags": ["easy"]},
    {"problem": "Solve x^2=9 for x>0.", "answer": "3", "level": 2, "tags": []},
    {"problem": "  what is 2+2? ", "answer": 4, "level": 1, "tags": ["dup"]},
]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_rows_get_stable_ids_and_keep_unknown_fields(lake: Lake, tmp_path: Path) -> None:
    report = ingest(lake, [str(write_jsonl(tmp_path / "a.jsonl", ROWS))], "raw")
    frame = pl.from_arrow(lake.read("raw"))
    assert report.version.rows == 3
    assert frame["source"].to_list() == ["a"] * 3
    assert frame["source_id"].to_list() == ["1", "2", "3"]  # line numbers when no id field
    assert frame["answer"].to_list() == ["4", "3", "4"]
    ids = frame["id"].to_list()
    assert ids[0] == ids[2] and ids[0] != ids[1]  # same normalized prompt, same id
    assert json.loads(frame["metadata"][0]) == {"level": 1, "tags": ["easy"]}


@pytest.mark.parametrize("fmt", ["json", "parquet", "csv", "hf-disk"])
def test_other_formats_give_the_same_rows(lake: Lake, tmp_path: Path, fmt: str) -> None:
    rows = [
        {"problem": r["problem"], "answer": str(r["answer"]), "level": r["level"]} for r in ROWS
    ]
    if fmt == "json":
        path = tmp_path / "s.json"
        path.write_text(json.dumps(rows))
    elif fmt == "parquet":
        path = tmp_path / "s.parquet"
        pl.DataFrame(rows).write_parquet(path)
    elif fmt == "csv":
        path = tmp_path / "s.csv"
        pl.DataFrame(rows).write_csv(path)
    else:
        import datasets

        path = tmp_path / "s_hf"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    ingest(lake, [str(path)], "raw")
    frame = pl.from_arrow(lake.read("raw"))
    assert frame["problem"].to_list() == [r["problem"] for r in rows]
    assert frame["answer"].to_list() == ["4", "3", "4"]
    assert json.loads(frame["metadata"][1])["level"] in (2, "2")  # csv keeps text


def test_hub_path_uses_datasets_load_dataset(lake: Lake, tmp_path: Path, monkeypatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name: str, split: str | None = None):
        calls.append((name, split))
        return datasets.Dataset.from_list([{"question": "Hub q?", "answer": "1"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ingest(lake, ["openai/gsm8k"], "hub", mapping={"problem": "question"}, split="train")
    assert calls == [("openai/gsm8k", "train")]
    assert lake.read("hub")["source"].to_pylist() == ["openai/gsm8k"]


def test_hf_dataset_dict_needs_a_split(lake: Lake, tmp_path: Path) -> None:
    import datasets

    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([{"problem": "a?"}]),
            "test": datasets.Dataset.from_list([{"problem": "b?"}]),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(IngestError, match=r"splits \['train', 'test'\]; choose one with --split"):
        ingest(lake, [str(tmp_path / "dd")], "raw")
    ingest(lake, [str(tmp_path / "dd")], "raw", split="test")
    assert lake.read("raw")["problem"].to_pylist() == ["b?"]


def test_mapping_and_missing_field_errors(lake: Lake, tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "q.jsonl", [{"question": "Q1?", "expected_answer": "7", "uid": "x"}]
    )
    with pytest.raises(
        IngestError,
        match=r"required field 'problem' not found; available fields: \['question', 'expected_answer', 'uid'\]",
    ):
        ingest(lake, [str(path)], "raw")
    with pytest.raises(IngestError, match="no field 'nope'"):
        ingest(lake, [str(path)], "raw", mapping={"problem": "question", "answer": "nope"})
    mapping = parse_mapping("problem=question,answer=expected_answer,source_id=uid")
    ingest(lake, [str(path)], "raw", mapping=mapping)
    row = lake.read("raw").to_pylist()[0]
    assert (row["problem"], row["answer"], row["source_id"], row["metadata"]) == (
        "Q1?",
        "7",
        "x",
        "{}",
    )
    with pytest.raises(IngestError, match="bad --map target 'prompt'"):
        parse_mapping("prompt=question")


def test_malformed_line_names_file_and_line_and_commits_nothing(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "ok?"}\n\n{"problem": "fine?"}\n{"problem": broken}\n[1, 2]\n')
    with pytest.raises(IngestError, match=rf"{path}:4: malformed line"):
        ingest(lake, [str(path)], "raw")
    assert lake.tables() == []


def test_on_error_skip_records_each_bad_line_in_drops(lake: Lake, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "ok?"}\n\n{"problem": "fine?"}\n{"problem": broken}\n[1, 2]\n')
    report = ingest(lake, [str(path)], "raw", on_error="skip")
    assert report.version.rows == 2
    drops = lake.sql(
        "SELECT uid, reason, step, output_table, output_version, input_table FROM drops "
        "ORDER BY uid"
    ).fetchall()
    assert drops == [
        ("bad:4", "malformed", "ingest", "raw", 1, None),
        ("bad:5", "malformed", "ingest", "raw", 1, None),
    ]
    detail = json.loads(lake.sql("SELECT detail FROM drops ORDER BY uid").fetchall()[1][0])
    assert detail["line"] == 5 and "expected a JSON object" in detail["error"]
    assert detail["file"] == str(path)
    # The rows and their drops landed in one commit: one build id, one snapshot.
    assert report.drops_version is not None
    assert report.drops_version.build_id == report.version.build_id
    assert report.drops_version.snapshot_id == report.version.snapshot_id


def test_bad_json_array_csv_and_empty_inputs(lake: Lake, tmp_path: Path) -> None:
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('[\n {"problem": "a"},\n {"problem": }\n]')
    with pytest.raises(IngestError, match=rf"{bad_json}:3: malformed JSON"):
        ingest(lake, [str(bad_json)], "raw")
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text('problem,answer\n"a?",1\n"b?",2,extra\n')
    with pytest.raises(
        IngestError, match=rf"{bad_csv}:3: malformed row: expected 2 fields, found 3"
    ):
        ingest(lake, [str(bad_csv)], "raw")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(IngestError, match="no rows found .*nothing was committed"):
        ingest(lake, [str(empty)], "raw")
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"problem": "a?"}, {"problem": "  "}])
    with pytest.raises(IngestError, match=rf"{blank}:2: required field 'problem' is empty"):
        ingest(lake, [str(blank)], "raw")
    with pytest.raises(IngestError, match="no such file"):
        ingest(lake, [str(tmp_path / "missing.jsonl")], "raw")
    with pytest.raises(IngestError, match="unknown domain 'poetry'"):
        ingest(lake, [str(blank)], "raw", domain="poetry")
    assert lake.tables() == []


def test_a_failed_ingest_keeps_the_previous_version(lake: Lake, tmp_path: Path) -> None:
    good = write_jsonl(tmp_path / "good.jsonl", ROWS)
    ingest(lake, [str(good)], "raw")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x"}\n{oops\n')
    with pytest.raises(IngestError):
        ingest(lake, [str(good), str(bad)], "raw")
    assert [v.version for v in lake.versions("raw")] == [1]
    assert lake.read("raw").num_rows == 3


SOURCES = {
    "math_train.jsonl": ({}, "math", 7474),
    "aime_1983_2023.jsonl": ({}, "math", 975),
    "gsm8k_train.jsonl": ({"problem": "question"}, "math", 7473),
    "leetcode_train.jsonl": ({}, "code", 1889),
    "openmath_aops_threads.jsonl": ({"problem": "forum_post"}, "math", 10),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_every_shared_source_ingests(lake: Lake, shared_data: Path, name: str) -> None:
    mapping, domain, rows = SOURCES[name]
    path = shared_data / "sources" / name
    report = ingest(lake, [str(path)], "src", mapping=mapping, domain=domain)
    assert report.version.rows == rows
    first = json.loads(path.read_text().split("\n")[0])
    row = lake.read("src").slice(0, 1).to_pylist()[0]
    kept = set(json.loads(row["metadata"]))
    # Every source field is somewhere: a column or the metadata JSON.
    assert set(first) - kept <= {mapping.get("problem", "problem"), "answer"}
    assert row["problem"] == first[mapping.get("problem", "problem")]


def test_all_shared_sources_line_counts_match(shared_data: Path) -> None:
    for name, (_, _, rows) in SOURCES.items():
        lines = [x for x in (shared_data / "sources" / name).read_text().split("\n") if x.strip()]
        assert len(lines) == rows, name


def test_rows_get_unique_uids_and_keep_the_sources_own_ids(lake: Lake, shared_data: Path) -> None:
    # MATH train and historic AIME repeat ids (8,449 rows, 8,160 distinct source ids).
    paths = [str(shared_data / "sources" / n) for n in ("math_train.jsonl", "aime_1983_2023.jsonl")]
    ingest(lake, paths, "math_aime")
    stats = lake.sql(
        "SELECT count(*), count(DISTINCT uid), count(DISTINCT source_id) FROM math_aime"
    ).fetchall()[0]
    assert stats[0] == 8449 and stats[1] == 8449 and stats[2] < 8449
    assert lake.sql(
        "SELECT uid FROM math_aime WHERE source = 'aime_1983_2023' LIMIT 1"
    ).fetchall() == [("aime_1983_2023:1",)]


def test_nested_fields_of_different_shapes_round_trip_exactly(lake: Lake, tmp_path: Path) -> None:
    rows = [
        {"problem": "a?", "tests": {"functional": "assert f(1) == 2"}, "kwargs": [{"n": 3}]},
        {"problem": "b?", "tests": [{"input": "1", "output": "2"}], "kwargs": [{"x": "y"}, {}]},
        {"problem": "c?", "kwargs": [None, {"n": 1, "m": [1, 2]}]},
    ]
    ingest(lake, [str(write_jsonl(tmp_path / "n.jsonl", rows))], "nested")
    metadata = [json.loads(m) for m in lake.read("nested")["metadata"].to_pylist()]
    assert metadata == [{k: v for k, v in r.items() if k != "problem"} for r in rows]


def test_rows_whose_every_field_is_nested_ingest(lake: Lake, tmp_path: Path) -> None:
    """OpenAI-style tool conversations: `messages` and `tools` only, shapes differing by row."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": "Add 2 and 3"},
                {"role": "assistant", "content": None, "tool_calls": [{"name": "add"}]},
            ],
            "tools": [{"name": "add", "parameters": {"type": "object"}}],
        },
        {"messages": [{"role": "user", "content": "Hi"}], "tools": []},
    ]
    path = write_jsonl(tmp_path / "tools.jsonl", rows)
    ingest(lake, [str(path)], "tools", mapping={"problem": "messages"})
    table = lake.read("tools")
    assert [json.loads(p) for p in table["problem"].to_pylist()] == [r["messages"] for r in rows]
    assert [json.loads(m) for m in table["metadata"].to_pylist()] == [
        {"tools": r["tools"]} for r in rows
    ]


def test_lake_tables_are_sources_too(lake: Lake, tmp_path: Path) -> None:
    ingest(lake, [str(write_jsonl(tmp_path / "a.jsonl", ROWS))], "first")
    report = ingest(lake, ["first@1", str(write_jsonl(tmp_path / "b.jsonl", ROWS[:1]))], "both")
    frame = pl.from_arrow(lake.read("both"))
    assert frame["uid"].to_list() == ["a:1", "a:2", "a:3", "b:1"]
    assert report.version.parents == ["first@1"]
    with pytest.raises(IngestError, match="same source is given twice"):
        ingest(lake, ["first@1", "first@1"], "again")


def test_values_keep_their_json_types_and_structured_prompts_read(
    lake: Lake, tmp_path: Path
) -> None:
    # A field holding 1 in one row and "3" in the next keeps both as they were.
    rows = [{"problem": "a?", "n": 1}, {"problem": "b?", "n": "3"}, {"problem": "c?", "n": True}]
    ingest(lake, [str(write_jsonl(tmp_path / "m.jsonl", rows))], "mixed")
    assert [json.loads(m) for m in lake.read("mixed")["metadata"].to_pylist()] == [
        {"n": 1},
        {"n": "3"},
        {"n": True},
    ]
    # A prompt given as chat turns (HelpSteer3's `context`) from Parquet is kept as JSON text.
    turns = [[{"role": "user", "content": "Hi?"}], [{"role": "user", "content": "Bye?"}]]
    pl.DataFrame({"context": turns, "score": [1, -2]}).write_parquet(tmp_path / "c.parquet")
    ingest(lake, [str(tmp_path / "c.parquet")], "chats", mapping={"problem": "context"})
    assert [json.loads(p) for p in lake.read("chats")["problem"].to_pylist()] == turns


def test_a_null_prompt_is_a_drop_when_skipping(lake: Lake, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "n.jsonl", [{"problem": "ok?"}, {"problem": None}, {"x": 1}])
    with pytest.raises(IngestError, match=r"n.jsonl:2: required field 'problem' is empty"):
        ingest(lake, [str(path)], "nulls")
    report = ingest(lake, [str(path)], "nulls", on_error="skip")
    assert report.version.rows == 1
    assert [(m.line, m.error) for m in report.malformed] == [
        (2, "required field 'problem' is empty or null"),
        (3, "required field 'problem' is empty or null"),
    ]


# -- input that is not what it seems: every rule holds on every read path -----------------------

DEEP = "[" * 10_000 + "]" * 10_000  # past Python's recursion limit and Polars' depth limit
DEEPISH = "[" * 300 + "]" * 300  # parsed by both, but deeper than MAX_DEPTH


def _parquet(path: Path, **columns) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)
    return path


def _binary(values: list, list_of: bool = False):
    import pyarrow as pa

    return pa.array(values, pa.list_(pa.binary()) if list_of else pa.binary())


OK = '{"problem": "fine?"}\n'
BAD_INPUTS: dict[str, tuple[object, str]] = {
    # file name: (its content, or a function writing it; the error it must give)
    "deep.jsonl": (OK + '{"problem": "p", "x": ' + DEEP + "}\n",
                   r"deep.jsonl:2: malformed line: nested deeper than 256 levels"),
    "deepish.jsonl": (OK + '{"problem": "p", "x": ' + DEEPISH + "}\n",
                      r"deepish.jsonl:2: malformed line: nested deeper than 256 levels"),
    "deep.json": ('[\n{"problem": "a"},\n{"problem": "b", "x": ' + DEEP + "}\n]",
                  r"deep.json:3: malformed item 2: nested deeper than 256 levels"),
    # Polars' fast path kept the first value, Python's json (the slow path) the last
    "dup_flat.jsonl": (OK + '{"problem": "a", "answer": "1", "answer": "2"}\n',
                       r"dup_flat.jsonl:2: malformed line: duplicate key 'answer'"),
    "dup_slow.jsonl": ('{"problem": "a", "answer": "1", "answer": "2", "m": {"k": 1}}\n',
                       r"dup_slow.jsonl:1: malformed line: duplicate key 'answer'"),
    "dup_nested.jsonl": ('{"problem": "a", "m": {"k": 1, "k": 2}}\n',
                         r"dup_nested.jsonl:1: malformed line: duplicate key 'k'"),
    "dup_escaped.jsonl": (OK + '{"problem": "a", "\\u0061nswer": "1", "answer": "2"}\n',
                          r"dup_escaped.jsonl:2: malformed line: duplicate key 'answer'"),
    "dup.json": ('[{"problem": "a"},\n {"problem": "b", "answer": 1, "answer": 2}]',
                 r"dup.json:2: malformed item 2: duplicate key 'answer'"),
    "dup.csv": ("problem,answer,answer\nq?,1,2\n",
                r"dup.csv:1: the header names the column 'answer' twice"),
    "nan.jsonl": (OK + '{"problem": "a", "answer": NaN}\n',
                  r"nan.jsonl:2: malformed line: NaN is not valid JSON"),
    "inf.jsonl": ('{"problem": "a", "s": -Infinity}\n',
                  r"inf.jsonl:1: malformed line: -Infinity is not valid JSON"),
    "huge.jsonl": ('{"problem": "a", "s": 1e999}\n',
                   r"huge.jsonl:1: malformed line: the number 1e999 is too large"),
    "nan.json": ('[{"problem": "a", "s": Infinity}]',
                 r"nan.json:1: malformed item 1: Infinity is not valid JSON"),
    "nan.parquet": (lambda p: _parquet(p, problem=["a", "b"], s=[1.5, float("nan")]),
                    r"nan.parquet:2: column 's' holds NaN or an infinity"),
    "inf.parquet": (lambda p: _parquet(p, problem=["a"], v=[[1.0, float("inf")]]),
                    r"inf.parquet:1: column 'v' holds NaN or an infinity"),
    "bin.parquet": (lambda p: _parquet(p, problem=["a"], blob=_binary([b"\x00\xff"])),
                    r"bin.parquet: column 'blob' holds binary data \(Binary\)"),
    "bins.parquet": (lambda p: _parquet(p, problem=["a"], b=_binary([[b"x"]], list_of=True)),
                     r"bins.parquet: column 'b' holds binary data"),
    "empty.parquet": (b"", r"empty.parquet: the file is empty \(0 bytes\)"),
    "junk.parquet": (b"not parquet at all", r"junk.parquet: not a readable Parquet file"),
}  # fmt: skip


def _write_bad(tmp: Path, name: str) -> Path:
    body = BAD_INPUTS[name][0]
    path = tmp / name
    if callable(body):
        body(path)
    elif isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(str(body))
    return path


@pytest.fixture(scope="module")
def lake_with_raw(tmp_path_factory) -> tuple[Lake, str]:
    """One lake for the bad inputs below: each must leave its table `raw` as it was."""
    root = tmp_path_factory.mktemp("bad")
    lake = Lake(root / "lake")
    info = ingest(lake, [str(write_jsonl(root / "good.jsonl", ROWS))], "raw").version
    return lake, info.content_hash


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_gets_one_sentence_naming_file_and_line_and_the_lake_is_untouched(
    lake_with_raw: tuple[Lake, str], tmp_path: Path, name: str
) -> None:
    lake, content_hash = lake_with_raw
    data_dir = Path(lake.data_path)
    files = sorted(data_dir.rglob("*"))
    with pytest.raises(IngestError, match=BAD_INPUTS[name][1]) as caught:
        ingest(lake, [str(_write_bad(tmp_path, name))], "raw")
    assert "\n" not in str(caught.value)
    assert [v.version for v in lake.versions("raw")] == [1]
    assert lake.verify_hash("raw").content_hash == content_hash
    assert lake.read("raw").num_rows == 3
    assert sorted(data_dir.rglob("*")) == files, "the refused ingest left files in the lake"


SKIPPABLE = ["deep.jsonl", "deepish.jsonl", "deep.json", "dup_flat.jsonl", "dup_escaped.jsonl",
             "dup.json", "nan.jsonl", "nan.parquet"]  # fmt: skip


@pytest.mark.parametrize("name", SKIPPABLE)
def test_each_bad_line_or_row_is_skippable(
    lake_with_raw: tuple[Lake, str], tmp_path: Path, name: str
) -> None:
    lake, _ = lake_with_raw
    table = name.replace(".", "_")
    report = ingest(lake, [str(_write_bad(tmp_path, name))], table, on_error="skip")
    assert report.version.rows == 1 and len(report.malformed) == 1
    reasons = lake.sql(f"SELECT reason FROM drops WHERE output_table = '{table}'").fetchall()
    assert reasons == [("malformed",)]


def test_keys_that_only_look_repeated_are_not_duplicates(lake: Lake, tmp_path: Path) -> None:
    rows = [
        # the same key at different depths, and in sibling objects
        {"problem": "a?", "m": {"problem": "x"}, "turns": [{"role": "u"}, {"role": "a"}]},
        # key-like text inside a value
        {"problem": 'b? {"problem": 1, "problem": 2}', "answer": '"answer": 3'},
    ]
    path = write_jsonl(tmp_path / "k.jsonl", rows)
    ingest(lake, [str(path)], "keys")
    frame = lake.read("keys").to_pylist()
    assert [r["problem"] for r in frame] == ["a?", 'b? {"problem": 1, "problem": 2}']
    assert json.loads(frame[0]["metadata"]) == {"m": {"problem": "x"}, "turns": rows[0]["turns"]}
    flat = write_jsonl(tmp_path / "flat.jsonl", [rows[1]])  # read by Polars' fast path
    ingest(lake, [str(flat)], "flat")
    assert lake.read("flat")["answer"].to_pylist() == ['"answer": 3']


def test_a_byte_order_mark_is_skipped(lake: Lake, tmp_path: Path) -> None:
    bom = b"\xef\xbb\xbf"
    (tmp_path / "b.json").write_bytes(bom + json.dumps(ROWS[:2]).encode())
    (tmp_path / "b.jsonl").write_bytes(bom + b"".join(json.dumps(r).encode() + b"\n" for r in ROWS))
    ingest(lake, [str(tmp_path / "b.json")], "arr")
    ingest(lake, [str(tmp_path / "b.jsonl")], "lines")
    assert lake.read("arr")["problem"].to_pylist() == [r["problem"] for r in ROWS[:2]]
    assert lake.read("lines")["problem"].to_pylist() == [r["problem"] for r in ROWS]
    assert json.loads(lake.read("lines")["metadata"][0].as_py()) == {"level": 1, "tags": ["easy"]}


def test_json_array_items_keep_nested_values_as_json(lake: Lake, tmp_path: Path) -> None:
    rows = [{"problem": "a?", "tags": ["x"], "m": {"k": [1, {"z": None}]}}]
    (tmp_path / "n.json").write_text(json.dumps(rows))
    ingest(lake, [str(tmp_path / "n.json")], "arr")
    assert json.loads(lake.read("arr")["metadata"][0].as_py()) == {
        "tags": ["x"],
        "m": {"k": [1, {"z": None}]},
    }


def test_a_parquet_file_without_rows_names_the_file(lake: Lake, tmp_path: Path) -> None:
    import pyarrow as pa

    path = _parquet(tmp_path / "zero.parquet", problem=pa.array([], pa.string()))
    with pytest.raises(IngestError, match=rf"no rows found in {path}; nothing was committed"):
        ingest(lake, [str(path)], "raw")
    assert lake.tables() == []
