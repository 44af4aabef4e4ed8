"""Exports in the Hugging Face layout read back with `datasets`; the card; push up to the wire."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import datasets
import polars as pl
import pytest
from huggingface_hub import DatasetCard, HfApi
from huggingface_hub.errors import HfHubHTTPError
from typer.testing import CliRunner

import cli.export  # noqa: F401  (registers `cascade export` / `push` until cli.main imports them)
from builders import math_rl_v2
from builders.publish import ExportError, PushError, export_dataset, push_dataset
from builders.publish.export import build_command
from builders.runner import build_dataset
from cli.app import app
from cli.console import CascadeError
from lake import Lake, LakeError
from lake.catalog import chain_hash


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    lake = Lake(root / "lake")
    built = build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=lake.path / "manifests")
    return lake, built


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def _sorted(table) -> pl.DataFrame:
    return pl.from_arrow(table).sort("uid")


def test_hf_export_reads_back_with_the_same_rows_and_features(demo, tmp_path) -> None:
    lake, built = demo
    out = tmp_path / "hf"
    export = export_dataset(lake, "math_rl_v2@1", out, "hf", rows_per_shard=150)
    assert [p.name for p in export.files["train"]] == [
        "train-00000-of-00003.parquet", "train-00001-of-00003.parquet",
        "train-00002-of-00003.parquet",
    ]  # fmt: skip
    original = lake.read("math_rl_v2@1")
    loaded = datasets.load_dataset(str(out))
    assert list(loaded) == ["train"]
    train = loaded["train"]
    assert train.features == datasets.Features.from_arrow_schema(original.schema)
    assert _sorted(train.data.table).equals(_sorted(original))
    # the manifest travels with the data, byte for byte
    assert (out / "cascade_manifest.json").read_bytes() == built.manifest_path.read_bytes()


def test_the_card_is_hub_metadata_and_says_how_the_data_was_built(demo, tmp_path) -> None:
    lake, built = demo
    m = built.manifest
    export_dataset(lake, "math_rl_v2", tmp_path / "hf", "hf", license="cc-by-4.0", language=["en"])
    card = DatasetCard.load(tmp_path / "hf" / "README.md", repo_type="dataset")
    meta = card.data.to_dict()
    assert meta["license"] == "cc-by-4.0" and meta["language"] == ["en"]
    assert meta["size_categories"] == ["n<1K"]
    assert "text-generation" in meta["task_categories"]
    assert meta["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*"}]}
    ]
    text = card.text
    manifest_sha = hashlib.sha256(built.manifest_path.read_bytes()).hexdigest()
    assert f"sha256 `{manifest_sha}`" in text and "(cascade_manifest.json)" in text
    assert f"`{m.output.content_hash}`" in text and f"`{m.code_version}`" in text
    for bench in m.benchmarks:
        assert f"| {bench.name} | {bench.items:,} | `{bench.content_hash}` |" in text
    for step in m.funnel:
        assert f"| {step.step} | {step.rows_in:,} | {step.rows_out:,} |" in text
    assert "cascade build dataset math_rl_v2 --profile demo" in text


def test_build_command_names_sources_and_changed_parameters(demo) -> None:
    _, built = demo
    manual = built.manifest.model_copy(
        update={"profile": "default", "params": {**built.manifest.params, "ngram": 13}}
    )
    command = build_command(manual)
    source = built.manifest.sources[0].path
    assert command.startswith(f"cascade build dataset math_rl_v2 --source {source}")
    assert "--set ngram=13" in command and "num_perm" not in command  # default kept silent


def test_jsonl_and_parquet_exports_and_splits(demo, tmp_path) -> None:
    lake, _ = demo
    export = export_dataset(lake, "math_rl_v2", tmp_path / "j", "jsonl", rows_per_shard=400)
    assert [len(p.read_text().splitlines()) for p in export.files["train"]] == [400, 20]
    assert export.card is None and not (tmp_path / "j" / "README.md").exists()
    back = pl.concat([pl.read_ndjson(p) for p in export.files["train"]]).sort("uid")
    assert back["problem"].to_list() == _sorted(lake.read("math_rl_v2"))["problem"].to_list()

    # a table with a split column is exported split by split
    rows = pl.from_arrow(lake.read("math_rl_v2")).with_columns(
        pl.when(pl.col("uid").str.ends_with("7")).then(pl.lit("test")).otherwise(pl.lit("train"))
        .alias("split")
    )  # fmt: skip
    lake.commit("split_set", rows)
    export = export_dataset(lake, "split_set", tmp_path / "s", "hf")
    assert export.manifest is None and "No dataset manifest was found" in export.card.read_text()
    loaded = datasets.load_dataset(str(tmp_path / "s"))
    assert {k: v.num_rows for k, v in loaded.items()} == dict(
        rows.group_by("split").len().iter_rows()
    )


def test_bad_exports_get_one_sentence(demo, tmp_path) -> None:
    lake, _ = demo
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(ExportError, match="is not an empty directory"):
        export_dataset(lake, "math_rl_v2", tmp_path / "full", "hf")
    with pytest.raises(ExportError, match="unknown export format 'csv'"):
        export_dataset(lake, "math_rl_v2", tmp_path / "new", "csv")
    with pytest.raises(LakeError, match="has no version 9"):
        export_dataset(lake, "math_rl_v2@9", tmp_path / "new", "hf")
    assert not (tmp_path / "new").exists()
    result = CliRunner().invoke(
        app, ["--lake", str(lake.path), "export", "math_rl_v2@9", str(tmp_path / "c")]
    )
    assert isinstance(result.exception, CascadeError)
    assert str(result.exception) == "table 'math_rl_v2' has no version 9 (versions 1..1)"


def test_cli_export_writes_the_hub_layout(demo, tmp_path) -> None:
    lake, _ = demo
    result = CliRunner().invoke(
        app,
        ["--lake", str(lake.path), "export", "math_rl_v2", str(tmp_path / "o"), "--format", "hf"],
    )
    assert result.exit_code == 0, result.output
    assert "train: 420 rows in 1 files" in result.output
    assert sorted(p.relative_to(tmp_path / "o").as_posix() for p in (tmp_path / "o").rglob("*")) == [
        "README.md", "cascade_manifest.json", "data", "data/train-00000-of-00001.parquet",
    ]  # fmt: skip


# -- push, up to the network boundary -----------------------------------------------------------


class RecordingHub:
    """Stands in for HfApi's network calls and records them (and what the folder held)."""

    def __init__(self, monkeypatch, fail_upload: Exception | None = None) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.uploaded: dict[str, bytes] = {}
        self.fail_upload = fail_upload
        for name in ("create_repo", "upload_folder", "create_tag"):
            monkeypatch.setattr(HfApi, name, self._recorder(name))

    def _recorder(self, name: str):
        def call(api, *args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name == "upload_folder":
                if self.fail_upload is not None:
                    raise self.fail_upload
                folder = Path(kwargs["folder_path"])
                self.uploaded = {
                    p.relative_to(folder).as_posix(): p.read_bytes()
                    for p in folder.rglob("*")
                    if p.is_file()
                }
                return SimpleNamespace(oid="c0ffee", commit_url="https://hub.example/commit/c0ffee")
            return None

        return call


def test_push_uploads_the_export_with_card_and_manifest_and_tags_the_version(
    demo, monkeypatch
) -> None:
    lake, built = demo
    hub = RecordingHub(monkeypatch)
    pushed = push_dataset(lake, "math_rl_v2@1", "cascade-org/math_rl_v2", private=True, token="t")
    assert [c[0] for c in hub.calls] == ["create_repo", "upload_folder", "create_tag"]
    (_, repo_args, repo_kwargs), (_, _, upload), (_, tag_args, tag) = hub.calls
    assert repo_args == ("cascade-org/math_rl_v2",)
    assert repo_kwargs == {"repo_type": "dataset", "private": True, "exist_ok": True}
    assert upload["repo_type"] == "dataset" and upload["delete_patterns"] == ["data/*"]
    assert built.manifest.output.content_hash in upload["commit_description"]
    assert sorted(hub.uploaded) == [
        "README.md", "cascade_manifest.json", "data/train-00000-of-00001.parquet",
    ]  # fmt: skip
    assert hub.uploaded["cascade_manifest.json"] == built.manifest_path.read_bytes()
    assert b"(cascade_manifest.json)" in hub.uploaded["README.md"]
    assert tag_args == ("cascade-org/math_rl_v2",)
    assert tag["tag"] == "v1" and tag["revision"] == "c0ffee" and tag["repo_type"] == "dataset"
    assert pushed.commit == "c0ffee" and pushed.tag == "v1" and pushed.ref == "math_rl_v2@1"


def test_push_failures_are_one_sentence(demo, monkeypatch) -> None:
    lake, _ = demo
    with pytest.raises(PushError, match="must be ORG/NAME"):
        push_dataset(lake, "math_rl_v2", "math_rl_v2")
    response = SimpleNamespace(status_code=401, headers={}, request=None)
    RecordingHub(monkeypatch, fail_upload=HfHubHTTPError("401 Unauthorized", response=response))
    with pytest.raises(PushError, match=r"pushing math_rl_v2@1 to o/d failed \(HfHubHTTPError"):
        push_dataset(lake, "math_rl_v2", "o/d")
    result = CliRunner().invoke(
        app, ["--lake", str(lake.path), "push", "math_rl_v2", "--repo", "o/d", "--private"]
    )
    assert isinstance(result.exception, CascadeError)
    assert "401 Unauthorized" in str(result.exception)


# -- provenance: a version leaves the lake only with the bytes its hash was computed over -------


def test_a_tampered_version_is_neither_exported_nor_pushed(tmp_path, monkeypatch) -> None:
    import pyarrow.parquet as pq

    lake = Lake(tmp_path / "lake")
    rows = pl.DataFrame({"uid": ["a", "b"], "problem": ["1+1?", "2+2?"], "answer": ["2", "4"]})
    info = lake.commit("tiny", rows)
    (data_file,) = lake.files(info.ref)
    table = pq.read_table(data_file)  # the same schema, one answer changed
    pq.write_table(table.set_column(2, "answer", pl.Series(["2", "5"]).to_arrow()), data_file)
    found = lake.store.sha256(lake.store.relative(data_file))
    sentence = (
        f"tiny@1: content hash {chain_hash(None, [found])} of its data files does not match "
        f"expected {info.content_hash}; refusing to publish it"
    )
    for fmt in ("hf", "parquet", "jsonl"):
        with pytest.raises(ExportError) as caught:
            export_dataset(lake, "tiny@1", tmp_path / fmt, fmt)
        assert str(caught.value) == sentence
        assert not (tmp_path / fmt).exists()
    result = CliRunner().invoke(
        app, ["--lake", str(lake.path), "export", "tiny", str(tmp_path / "c")]
    )
    assert isinstance(result.exception, CascadeError) and str(result.exception) == sentence
    assert not (tmp_path / "c").exists()

    hub = RecordingHub(monkeypatch)
    with pytest.raises(ExportError, match="refusing to publish it"):
        push_dataset(lake, "tiny@1", "o/d", token="t")
    result = CliRunner().invoke(app, ["--lake", str(lake.path), "push", "tiny", "--repo", "o/d"])
    assert isinstance(result.exception, CascadeError) and str(result.exception) == sentence
    assert hub.calls == []  # nothing reached the Hub
