"""Length-prefixed pickle frames over raw file descriptors (pipes between our own processes)."""

from __future__ import annotations

import os
import pickle
import struct
from typing import Any


def send_frame(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    payload = struct.pack("<Q", len(data)) + data
    view = memoryview(payload)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = os.read(fd, n - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def recv_frame(fd: int) -> Any | None:
    header = read_exact(fd, 8)
    if header is None:
        return None
    (size,) = struct.unpack("<Q", header)
    body = read_exact(fd, size)
    return None if body is None else pickle.loads(body)
