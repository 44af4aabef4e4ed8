"""The floor: the lake (DuckLake catalog + cascade's versions), file utilities, the step contract,
the small base operators build their results on (`decide`, `counted`) and the progress
phases long work reports (`phase`).

Names are imported lazily, so an operator that only needs `StepResult` does not load DuckDB.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Lake": "catalog",
    "LakeBusyError": "catalog",
    "LakeError": "catalog",
    "TableRef": "catalog",
    "VersionInfo": "catalog",
    "code_version": "provenance",
    "file_sha256": "files",
    "json_lines": "files",
    "count_by": "operators",
    "counted": "operators",
    "decide": "operators",
    "Phase": "progress",
    "phase": "progress",
    "Step": "steps",
    "StepResult": "steps",
    "drop_rows": "steps",
    "run_steps": "steps",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lake' has no attribute {name!r}")
    return getattr(importlib.import_module(f"lake.{module}"), name)
