"""Arrow schemas of the lake's tables and their validation on commit.

A table kind names a contract: the columns a table of that kind must have and their types.
Extra columns are allowed (operators add measurements such as n-gram hits or pass rates), so
a contract states what downstream steps may rely on, not everything a table holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

DOMAINS = ("math", "code", "science", "if", "chat", "swe")


@dataclass(frozen=True)
class TableContract:
    """Required columns of one table kind; `nullable=False` columns may hold no nulls."""

    kind: str
    schema: pa.Schema
    description: str

    def validate(self, schema: pa.Schema, table_name: str) -> None:
        """Raise SchemaError naming the first column that breaks the contract."""
        for field in self.schema:
            if field.name not in schema.names:
                raise SchemaError(
                    f"table {table_name!r} ({self.kind}): missing required column "
                    f"{field.name!r} of type {field.type}; it has {schema.names}"
                )
            got = schema.field(field.name).type
            if not _compatible(got, field.type):
                raise SchemaError(
                    f"table {table_name!r} ({self.kind}): column {field.name!r} has type "
                    f"{got}, expected {field.type}"
                )


class SchemaError(ValueError):
    """A table does not match its contract."""


def _compatible(got: pa.DataType, want: pa.DataType) -> bool:
    if got == want:
        return True
    strings = (pa.string(), pa.large_string(), pa.string_view())
    if want in strings and got in strings:
        return True
    if pa.types.is_integer(want) and pa.types.is_integer(got):
        return True
    if pa.types.is_floating(want) and pa.types.is_floating(got):
        return True
    if pa.types.is_null(got):  # an all-null column read from an empty-ish source
        return True
    if pa.types.is_list(want) and (pa.types.is_list(got) or pa.types.is_large_list(got)):
        return _compatible(got.value_type, want.value_type)
    if pa.types.is_struct(want) and pa.types.is_struct(got):
        names = {got.field(i).name: got.field(i).type for i in range(got.num_fields)}
        return all(
            want.field(i).name in names
            and _compatible(names[want.field(i).name], want.field(i).type)
            for i in range(want.num_fields)
        )
    return False


PROMPTS = TableContract(
    kind="prompts",
    schema=pa.schema(
        [
            pa.field("uid", pa.string(), nullable=False),
            pa.field("id", pa.string(), nullable=False),
            pa.field("source", pa.string(), nullable=False),
            pa.field("source_id", pa.string(), nullable=False),
            pa.field("domain", pa.string(), nullable=False),
            pa.field("problem", pa.string(), nullable=False),
            pa.field("answer", pa.string()),
            pa.field("metadata", pa.string()),
        ]
    ),
    description=(
        "One prompt per row. uid is unique within a version and stable across versions "
        "(`source:line` for ingested rows); source_id is the source's own id (which sources "
        "often repeat); id is the hash of the normalized prompt text; answer is the "
        "reference answer as a string (null when the source has none); metadata is a JSON "
        "object with every source field not mapped to a column (tests, solutions, ...)."
    ),
)

DROPS = TableContract(
    kind="drops",
    schema=pa.schema(
        [
            pa.field("build_id", pa.string(), nullable=False),
            pa.field("output_table", pa.string(), nullable=False),
            pa.field("output_version", pa.int64(), nullable=False),
            pa.field("input_table", pa.string()),
            pa.field("input_version", pa.int64()),
            pa.field("uid", pa.string(), nullable=False),
            pa.field("step", pa.string(), nullable=False),
            pa.field("reason", pa.string(), nullable=False),
            pa.field("detail", pa.string()),
        ]
    ),
    description=(
        "Why each row was dropped: the build (build_id) and the table version it produced "
        "(output_table, output_version), the version the build read (input_table, "
        "input_version; null for rows read from files), the row's uid, the step, a short "
        "reason code and a JSON detail (which benchmark item matched, which row it duplicates, "
        "which line was malformed, ...). `WHERE output_table = 'x' AND output_version = 3` "
        "answers why a row is not in x@3."
    ),
)

GENERIC = TableContract(kind="generic", schema=pa.schema([]), description="No required columns.")

CONTRACTS: dict[str, TableContract] = {c.kind: c for c in (PROMPTS, DROPS, GENERIC)}


def register_contract(contract: TableContract) -> None:
    """Make a table kind known to the lake (used by modules that define new kinds)."""
    CONTRACTS[contract.kind] = contract


def contract_for(kind: str) -> TableContract:
    """Return the contract of a table kind or raise SchemaError listing the known kinds."""
    try:
        return CONTRACTS[kind]
    except KeyError:
        raise SchemaError(
            f"unknown table kind {kind!r}; known kinds: {sorted(CONTRACTS)}"
        ) from None


def validate_non_null(table: pa.Table, contract: TableContract, table_name: str) -> None:
    """Raise SchemaError if a non-nullable contract column holds nulls, naming the first row."""
    import pyarrow.compute as pc

    for field in contract.schema:
        if field.nullable or field.name not in table.column_names:
            continue
        col = table.column(field.name)
        if col.null_count:
            first = pc.index(pc.is_null(col), True).as_py()
            raise SchemaError(
                f"table {table_name!r} ({contract.kind}): column {field.name!r} must not be "
                f"null, but row {first} is null"
            )
