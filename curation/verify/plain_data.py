"""Builtin data, and ListNode/TreeNode graphs, to and from JSON, without trusting the sender.

The sandboxed program and the checker of its functional tests exchange call arguments and
results as JSON (never pickles: unpickling what an untrusted process wrote runs its code).
`encode` turns a value into JSON-safe lists; `decode` accepts only that shape and builds
only builtin data and the receiver's own node classes, so whatever a sender writes makes a
value, never runs code or picks a class (so no `__eq__` of the sender's reaches the checker).

Shape: a value is a JSON scalar (None, bool, int, float, str) or a list whose first item is a
tag: l list, t tuple, s set, f frozenset, d dict (keys and values alternate), q deque,
b bytes / y bytearray (base64), c complex, i big int (hex), r Fraction, e Decimal,
n a node (index into the node table). A node record is ["L", val, next] or
["T", val, left, right], its links node indices or null: shared and cyclic nodes keep their
identity, and a million-node list needs no deep nesting.
"""

from __future__ import annotations

import base64
import collections
import decimal
import fractions
import re
from collections.abc import Callable
from typing import Any

_BIG = 1 << 63
_HEX = re.compile(r"-?[0-9a-f]{1,100000}")
NODE_FIELDS = {"L": ("next",), "T": ("left", "right")}
NODE_KINDS = {"ListNode": "L", "TreeNode": "T"}


class NotData(TypeError):
    """A value (or one inside it) is not plain data: an object of some other class."""


class DataError(ValueError):
    """What was received is not a value in this module's shape."""


def _kind_of(value: Any) -> str | None:
    """'L' / 'T' for a ListNode / TreeNode (any class of that name with those fields)."""
    kind = NODE_KINDS.get(type(value).__name__)
    if kind is None or not hasattr(value, "val"):
        return None
    if not all(hasattr(value, f) for f in NODE_FIELDS[kind]):
        return None
    return kind


def encode(value: Any, known: list[Any] | None = None, made: list[Any] | None = None) -> list[Any]:
    """[encoded value, node table]. `known` nodes take the first indices, in order, so a
    receiver that sent them can match them up (arguments mutated in place); `made`, if
    given, receives every node of the table, in order."""
    table: list[Any] = []
    objects: list[Any] = []  # (keeps every node alive, so no id() is reused meanwhile)
    index: dict[int, int] = {}
    pending: list[Any] = []

    def node_ref(node: Any, kind: str) -> int:
        ref = index.get(id(node))
        if ref is None:
            ref = index[id(node)] = len(table)
            table.append(None)
            objects.append(node)
            pending.append((node, kind))
        return ref

    def enc(item: Any) -> Any:
        kind = type(item)
        if item is None or kind in (bool, str):
            return item
        if kind is int:
            return item if -_BIG < item < _BIG else ["i", format(item, "x")]
        if kind is float:
            return item
        if isinstance(item, bool):
            return bool(item)
        if isinstance(item, int):
            return enc(int.__int__(item))
        if isinstance(item, float):
            return float.__float__(item)
        if isinstance(item, str):
            return str.__str__(item)
        if isinstance(item, collections.deque):
            return ["q", *map(enc, item)]
        if isinstance(item, list):
            return ["l", *map(enc, list.__iter__(item))]
        if isinstance(item, tuple):
            return ["t", *map(enc, tuple.__iter__(item))]
        if isinstance(item, dict):
            out: list[Any] = ["d"]
            for key, val in dict.items(item):
                out.append(enc(key))
                out.append(enc(val))
            return out
        if isinstance(item, frozenset):
            return ["f", *map(enc, item)]
        if isinstance(item, set):
            return ["s", *map(enc, item)]
        if isinstance(item, bytearray):
            return ["y", base64.b64encode(item).decode()]
        if isinstance(item, bytes):
            return ["b", base64.b64encode(item).decode()]
        if isinstance(item, complex):
            return ["c", item.real, item.imag]
        if isinstance(item, fractions.Fraction):
            return ["r", enc(item.numerator), enc(item.denominator)]
        if isinstance(item, decimal.Decimal):
            return ["e", str(item)]
        node = _kind_of(item)
        if node is not None:
            return ["n", node_ref(item, node)]
        if type(item).__module__ == "numpy" and getattr(item, "ndim", None) == 0:
            return enc(item.item())  # a numpy scalar
        raise NotData(f"a {type(item).__name__} is not plain data")

    for node in known or ():
        kind = _kind_of(node)
        if kind is None:
            raise NotData(f"a {type(node).__name__} is not a node")
        node_ref(node, kind)
    try:
        encoded = enc(value)
        while pending:
            node, kind = pending.pop()
            links = [getattr(node, f) for f in NODE_FIELDS[kind]]
            record = [kind, enc(node.val)]
            for link in links:
                link_kind = None if link is None else _kind_of(link)
                if link is not None and link_kind is None:
                    raise NotData(f"a node links to a {type(link).__name__}")
                record.append(None if link is None else node_ref(link, link_kind))
            table[index[id(node)]] = record
    except RecursionError:
        raise NotData("a value nested too deeply") from None
    if made is not None:
        made.extend(objects)
    return [encoded, table]


def decode(
    message: Any,
    classes: dict[str, Callable[[], Any]] | None = None,
    reuse: list[Any] | None = None,
    made: list[Any] | None = None,
) -> Any:
    """The value of an `encode` result. `classes` maps 'L'/'T' to the receiver's node
    classes (nodes are refused without them); `reuse` are the receiver's own nodes that it
    sent as `known`: they get the received fields, in place; `made`, if given, receives
    every node of the table, in order. Raises DataError."""
    if not (isinstance(message, list) and len(message) == 2 and isinstance(message[1], list)):
        raise DataError("not an [value, nodes] pair")
    value, records = message
    reuse = reuse or []
    nodes: list[Any] = []
    for i, record in enumerate(records):
        if not (isinstance(record, list) and record and record[0] in NODE_FIELDS):
            raise DataError(f"node {i} is not a node record")
        kind = record[0]
        if len(record) != 2 + len(NODE_FIELDS[kind]):
            raise DataError(f"node {i} has {len(record)} fields")
        if i < len(reuse):
            node = reuse[i]
            if NODE_KINDS.get(type(node).__name__) != kind:
                raise DataError(f"node {i} changed its kind")
        else:
            if not classes or kind not in classes:
                raise DataError("a node, but no node classes here")
            node = classes[kind]()
        nodes.append(node)

    def dec(item: Any) -> Any:
        if item is None or type(item) in (bool, int, float, str):
            return item
        if type(item) is not list or not item or type(item[0]) is not str:
            raise DataError(f"not a tagged value: {str(item)[:40]}")
        tag, rest = item[0], item[1:]
        if tag == "l":
            return [dec(x) for x in rest]
        if tag == "t":
            return tuple(dec(x) for x in rest)
        if tag in ("s", "f"):
            members = [dec(x) for x in rest]
            try:
                return set(members) if tag == "s" else frozenset(members)
            except TypeError as exc:
                raise DataError(f"a set of unhashable items: {exc}") from None
        if tag == "d":
            if len(rest) % 2:
                raise DataError("a dict with a key and no value")
            out = {}
            for k, v in zip(rest[::2], rest[1::2], strict=True):
                key = dec(k)
                try:
                    out[key] = dec(v)
                except TypeError as exc:
                    raise DataError(f"an unhashable dict key: {exc}") from None
            return out
        if tag == "q":
            return collections.deque(dec(x) for x in rest)
        if tag == "n" and len(rest) == 1 and type(rest[0]) is int and 0 <= rest[0] < len(nodes):
            return nodes[rest[0]]
        if tag in ("b", "y") and len(rest) == 1 and type(rest[0]) is str:
            try:
                data = base64.b64decode(rest[0], validate=True)
            except ValueError:
                raise DataError("bad base64") from None
            return data if tag == "b" else bytearray(data)
        if tag == "i" and len(rest) == 1 and type(rest[0]) is str and _HEX.fullmatch(rest[0]):
            return int(rest[0], 16)
        if tag == "c" and len(rest) == 2 and all(type(x) in (int, float) for x in rest):
            return complex(rest[0], rest[1])
        if tag == "r" and len(rest) == 2:
            num, den = dec(rest[0]), dec(rest[1])
            if type(num) is not int or type(den) is not int or den == 0:
                raise DataError("a Fraction needs two ints")
            return fractions.Fraction(num, den)
        if tag == "e" and len(rest) == 1 and type(rest[0]) is str and len(rest[0]) < 1000:
            try:
                return decimal.Decimal(rest[0])
            except decimal.InvalidOperation:
                raise DataError("a bad Decimal") from None
        raise DataError(f"unknown or malformed tag {tag[:8]!r}")

    try:
        result = dec(value)
        for node, record in zip(nodes, records, strict=True):
            kind = record[0]
            links = []
            for link in record[2:]:
                if link is None:
                    links.append(None)
                elif type(link) is int and 0 <= link < len(nodes):
                    links.append(nodes[link])
                else:
                    raise DataError("a node link out of range")
            node.val = dec(record[1])
            for name, link in zip(NODE_FIELDS[kind], links, strict=True):
                setattr(node, name, link)
    except RecursionError:
        raise DataError("a value nested too deeply") from None
    if made is not None:
        made.extend(nodes)
    return result
