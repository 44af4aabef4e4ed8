"""Length-prefixed frames over raw file descriptors.

Two kinds, never mixed on one channel:
- pickle frames (`send_frame` / `recv_frame`) between our own trusted processes only (the
  pool and its workers): unpickling runs code, so what an untrusted process wrote must never
  reach `pickle.loads`;
- JSON frames (`send_json` / `recv_json` / `JsonFrames`) for everything a sandboxed process
  writes: a 4-byte length, capped by the reader before it buffers anything, then JSON, which
  decodes to builtin data only.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from typing import Any


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def send_frame(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    _write_all(fd, struct.pack("<Q", len(data)) + data)


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


class FrameError(ValueError):
    """A JSON frame that is too big or not JSON: the writer broke the protocol."""


def send_json(fd: int, obj: Any) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    _write_all(fd, struct.pack("<I", len(data)) + data)


def _parse(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise FrameError(f"not a JSON frame: {str(exc)[:80]}") from None


def recv_json(fd: int, limit: int) -> Any | None:
    """The next frame (None at end of file); FrameError past `limit` bytes or on bad JSON."""
    header = read_exact(fd, 4)
    if header is None:
        return None
    (size,) = struct.unpack("<I", header)
    if size > limit:
        raise FrameError(f"a frame of {size} bytes passes the limit of {limit}")
    body = read_exact(fd, size)
    if body is None:
        return None
    return _parse(body)


class JsonFrames:
    """Incremental reader of JSON frames from a non-blocking source (a select loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.buffer = bytearray()

    def feed(self, chunk: bytes) -> list[Any]:
        """Add bytes; return the frames now complete. FrameError as soon as a header
        announces more than `limit` bytes (nothing of that frame is buffered further)."""
        self.buffer += chunk
        frames = []
        while len(self.buffer) >= 4:
            (size,) = struct.unpack("<I", self.buffer[:4])
            if size > self.limit:
                raise FrameError(f"a frame of {size} bytes passes the limit of {self.limit}")
            if len(self.buffer) < 4 + size:
                break
            frames.append(_parse(bytes(self.buffer[4 : 4 + size])))
            del self.buffer[: 4 + size]
        return frames
