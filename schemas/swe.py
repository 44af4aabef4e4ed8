"""Contract of the `swe_instances` table: one repository issue with its fix, one row each.

SWE-bench-style sources (SWE-bench train, SWE-reBench, SWE-Smith, SWE-Fixer, SWE-Gym) share
these fields. `uid` is unique within a table (a hash of source and instance id: two sources
may reuse one instance id); `source_id` is the source's own instance id. `patch` is the gold
patch (unified diff) whose files are the ground truth of localization and whose changes the
repair reward compares against; `test_patch` adds the tests; FAIL_TO_PASS / PASS_TO_PASS
name the tests that the gold patch makes pass / keeps passing.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.tables import TableContract, register_contract

SWE_INSTANCES = TableContract(
    kind="swe_instances",
    schema=pa.schema(
        [
            pa.field("uid", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),
            pa.field("source_id", pa.string(), nullable=False),
            pa.field("repo", pa.string(), nullable=False),
            pa.field("base_commit", pa.string(), nullable=False),
            pa.field("problem_statement", pa.string(), nullable=False),
            pa.field("patch", pa.string(), nullable=False),
            pa.field("test_patch", pa.string()),
            pa.field("FAIL_TO_PASS", pa.list_(pa.string())),
            pa.field("PASS_TO_PASS", pa.list_(pa.string())),
        ]
    ),
    description=(
        "One SWE instance per row. uid: hash of (source, instance id), unique in a table; "
        "source_id: the source's instance id; repo: owner/name; base_commit: the commit the "
        "issue is reported against; problem_statement: the issue text; patch: the gold fix as "
        "a unified diff; test_patch: the diff adding its tests (null if the source has none); "
        "FAIL_TO_PASS / PASS_TO_PASS: test ids the gold patch makes pass / keeps passing."
    ),
)

register_contract(SWE_INSTANCES)
