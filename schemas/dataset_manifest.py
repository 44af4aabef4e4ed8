"""The dataset manifest a build writes: what was built, from what, how, and what was dropped."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TablePin(BaseModel):
    """A table version pinned by its content hash."""

    model_config = ConfigDict(extra="forbid")

    ref: str = Field(description="name@version in the lake")
    content_hash: str = Field(description="sha256 over the version's Parquet files")
    rows: int


class SourceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    rows: int
    version: str | None = None
    """The lake table version read (`math_raw@1`); None for a file."""
    content_hash: str | None = None
    """The table version's content hash, or `sha256:<hex>` of a local file's (or saved
    dataset directory's) bytes; None for a hub id (its revision is the hub's to pin)."""


class BenchmarkUsed(BaseModel):
    """A benchmark set a build kept its rows apart from."""

    model_config = ConfigDict(extra="forbid")

    name: str
    items: int
    content_hash: str
    origin: str = Field(description="local file path or hub dataset id")
    kind: Literal["texts", "tests", "urls", "repos"] = Field(
        default="texts",
        description="what was compared: the items' texts (word n-grams), their tests "
        "(behaviour), their problem URLs or their repositories",
    )


class FunnelStep(BaseModel):
    """Rows in and out of one recipe step, and its drops by reason."""

    model_config = ConfigDict(extra="forbid")

    step: str
    rows_in: int
    rows_out: int
    dropped: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0
    stats: dict = Field(default_factory=dict)
    skipped: str | None = None
    """Why the recipe did not run this step (its model is `none`, ...); None when it ran."""


class DatasetManifest(BaseModel):
    """Written by `cascade build dataset` to manifests/datasets/<name>/v<N>.json."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: int
    recipe: str
    profile: str
    created_at: datetime
    code_version: str
    lake: str
    build_id: str | None = Field(None, description="the build's id in the drops table")
    output: TablePin
    inputs: list[TablePin]
    drops: TablePin | None = None
    sources: list[SourceFile] = Field(default_factory=list)
    benchmarks: list[BenchmarkUsed] = Field(default_factory=list)
    params: dict = Field(default_factory=dict)
    funnel: list[FunnelStep] = Field(default_factory=list)
