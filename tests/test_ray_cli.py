"""`cascade decontaminate`, `dedup`, `verify` and `generate` with `--executor ray`: the same
output as the local executor.

One real cluster for the module (`ray start --head` on 127.0.0.1, tests/test_ray_servers.py);
the commands run in this process with `--ray-address` (or `RAY_ADDRESS`), on small inputs
cut into several blocks (`CASCADE_RAY_BLOCK_ROWS`). Each test also checks that the work
really ran on the cluster (the Ray executor's stages, or the engines on the workers), so a
command that ignored `--executor` would fail here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pytest
from test_ray_executor import assert_same_runs, synthetic_prompts  # type: ignore[import-not-found]
from test_ray_servers import RayCluster, needs_ray, ray_cluster  # type: ignore[import-not-found]
from typer.testing import CliRunner

from cli.main import command_app
from lake.catalog import Lake
from lake.cluster import RayExecutor
from lake.cluster.generation import ClusterBackend

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
AIME24 = str(SHARED / "benchmarks" / "aime24.jsonl")
pytestmark = [needs_ray, pytest.mark.slow]
app = command_app()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    with ray_cluster(num_cpus=2) as running:
        yield running


@dataclass
class OnCluster:
    """The options that send a command to the cluster, and what ran there."""

    args: list[str]
    stages: list[tuple[str, str]] = field(default_factory=list)
    generated_on_workers: list[int] = field(default_factory=list)


@pytest.fixture
def ray(cluster: RayCluster, monkeypatch: pytest.MonkeyPatch) -> OnCluster:
    monkeypatch.setenv("CASCADE_RAY_BLOCK_ROWS", "60")  # several blocks on small inputs
    seen = OnCluster(["--executor", "ray", "--ray-address", cluster.address])
    close, generate = RayExecutor.close, ClusterBackend.generate

    def recording_close(self: RayExecutor) -> None:
        seen.stages.extend((s.step, s.stage) for s in self.stages)
        close(self)

    def recording_generate(self: ClusterBackend, requests):  # noqa: ANN001, ANN202
        seen.generated_on_workers.append(len(requests))
        yield from generate(self, requests)

    monkeypatch.setattr(RayExecutor, "close", recording_close)
    monkeypatch.setattr(ClusterBackend, "generate", recording_generate)
    return seen


def cascade(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return result.output


def _same_files(a: Path, b: Path) -> None:
    assert a.read_bytes() == b.read_bytes(), f"{a} and {b} differ"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """400 prompts with copies, siblings, answerless rows and AIME quotes: as a jsonl file,
    and as the `corpus` table of a lake."""
    base = tmp_path_factory.mktemp("corpus")
    frame = synthetic_prompts(400, seed=7)
    frame.write_ndjson(base / "corpus.jsonl")
    Lake(base / "lake").commit("corpus", frame, kind="prompts")
    return base / "corpus.jsonl", base / "lake"


def test_decontaminate_on_the_cluster(
    tmp_path: Path, corpus: tuple[Path, Path], ray: OnCluster
) -> None:
    source, lake_dir = corpus
    for name, extra in (("local", []), ("ray", ray.args)):
        cascade(
            "decontaminate", "--input", str(source), "--benchmarks", AIME24,
            "--out", str(tmp_path / f"{name}.jsonl"),
            "--dropped", str(tmp_path / f"{name}_dropped.jsonl"), *extra,
        )  # fmt: skip
        cascade(
            "--lake", str(lake_dir), "decontaminate", "--table", "corpus", "--benchmarks",
            AIME24, "--out", f"decontaminated_{name}", *extra,
        )  # fmt: skip
    _same_files(tmp_path / "local.jsonl", tmp_path / "ray.jsonl")
    _same_files(tmp_path / "local_dropped.jsonl", tmp_path / "ray_dropped.jsonl")
    assert pl.read_ndjson(tmp_path / "ray_dropped.jsonl").height >= 2  # the AIME quotes
    lake = Lake(lake_dir)
    assert_same_runs(lake, "decontaminated_local", lake, "decontaminated_ray")
    # both runs on the cluster, with the boilerplate-aware rule's shuffle
    assert ray.stages.count(("decontaminate", "stock n-grams (shuffle on the n-gram)")) == 2


def test_dedup_on_the_cluster(tmp_path: Path, corpus: tuple[Path, Path], ray: OnCluster) -> None:
    source, lake_dir = corpus
    for name, extra in (("local", []), ("ray", ray.args)):
        cascade(
            "dedup", "--input", str(source), "--id-field", "uid",
            "--out", str(tmp_path / f"{name}.jsonl"),
            "--dropped", str(tmp_path / f"{name}_dropped.jsonl"), *extra,
        )  # fmt: skip
        cascade(
            "--lake", str(lake_dir), "dedup", "--table", "corpus", "--out", f"deduped_{name}",
            *extra,
        )  # fmt: skip
    _same_files(tmp_path / "local.jsonl", tmp_path / "ray.jsonl")
    _same_files(tmp_path / "local_dropped.jsonl", tmp_path / "ray_dropped.jsonl")
    reasons = pl.read_ndjson(tmp_path / "ray_dropped.jsonl")["reason"].value_counts()
    assert set(reasons["reason"]) == {"exact_duplicate", "near_duplicate"}
    lake = Lake(lake_dir)
    assert_same_runs(lake, "deduped_local", lake, "deduped_ray")
    assert ray.stages.count(("exact_dedup", "group by normalized text")) == 2
    assert ray.stages.count(("near_dedup", "candidate pairs (shuffle on band keys)")) == 2


def test_verify_on_the_cluster(tmp_path: Path, ray: OnCluster) -> None:
    records = pl.read_ndjson(SHARED / "sources" / "math_train.jsonl").head(150)
    answers = records["answer"].cast(pl.String).to_list()
    responses = pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(len(answers))],
            # every third response is wrong, every fifth has no boxed answer
            "response": [
                "no answer here"
                if i % 5 == 4
                else f"<think>...</think>\\boxed{{{a}{'0' * (i % 3 == 2)}}}"
                for i, a in enumerate(answers)
            ],
            "answer": answers,
        }
    )
    source = tmp_path / "responses.jsonl"
    responses.write_ndjson(source)
    lake_dir = tmp_path / "lake"
    Lake(lake_dir).commit("responses", responses, producer="test")
    for name, extra in (("local", []), ("ray", ray.args)):
        cascade(
            "verify", "--kind", "math", "--input", str(source),
            "--out", str(tmp_path / f"{name}.jsonl"), *extra,
        )  # fmt: skip
        cascade(
            "--lake", str(lake_dir), "verify", "--kind", "math", "--table", "responses",
            "--keep", "passed", "--out", f"passed_{name}", *extra,
        )  # fmt: skip
    _same_files(tmp_path / "local.jsonl", tmp_path / "ray.jsonl")
    passed = pl.read_ndjson(tmp_path / "ray.jsonl")["passed"]
    assert 0 < passed.sum() < passed.len()
    lake = Lake(lake_dir)
    assert_same_runs(lake, "passed_local", lake, "passed_ray")
    assert ray.stages.count(("verify", "map")) == 2


def test_generate_on_the_cluster(tmp_path: Path, ray: OnCluster) -> None:
    from curation.generate.tiny_teacher import build_tiny_teacher

    records = pl.read_ndjson(SHARED / "sources" / "math_train.jsonl").head(200).to_dicts()
    teacher = str(build_tiny_teacher(tmp_path / "teacher", [r["problem"] for r in records]))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records[:6]))
    address = ray.args[-1]
    generated = {}
    for name, extra, env in (
        ("local", [], None),
        ("ray", ray.args[:2], {"RAY_ADDRESS": address}),  # the address from the environment
    ):
        cascade(
            "--lake", str(tmp_path / name), "generate", "--input", str(prompts),
            "--model", teacher, "--out", "gens", "--mode", "both", "-k", "2",
            "--max-new-tokens", "12", "--temperature", "1.0", "--seed", "5",
            "--batch-size", "4", "--threads", "1", "--no-progress", "--json", *extra,
            env=env,
        )  # fmt: skip
        rows = Lake(tmp_path / name).read("gens").to_pylist()
        generated[name] = {r["id"]: (r["response"], r["finish_reason"]) for r in rows}
    assert len(generated["local"]) == 6 * 2 * 2
    assert generated["ray"] == generated["local"]
    assert sum(ray.generated_on_workers) == 6 * 2 * 2  # every sample came from the workers
