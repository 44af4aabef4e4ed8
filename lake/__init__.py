"""The floor: the lake (DuckLake catalog + cascade's versions), file utilities, the step contract."""

from lake.catalog import Lake, LakeBusyError, LakeError, TableRef, VersionInfo
from lake.files import code_version, file_sha256, json_lines
from lake.steps import Step, StepResult, drop_rows

__all__ = [
    "Lake",
    "LakeBusyError",
    "LakeError",
    "Step",
    "StepResult",
    "TableRef",
    "VersionInfo",
    "code_version",
    "drop_rows",
    "file_sha256",
    "json_lines",
]
