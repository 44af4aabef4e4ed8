"""Compiled loops for the decontamination scan: token spans with packed values, window hashes.

In NumPy these take a dozen passes and as many temporaries per token (edges, gathers of
unaligned 8-byte words, masks, one multiply-add pass per window length); a loop compiled by
Numba does each in one pass over the bytes or the tokens, and releases the GIL, so the
operator's worker threads run in parallel. `curation.decontaminate` prepares the byte masks
(which bytes are token bytes, which are thousands separators inside a number) with NumPy and
calls these. bench/decontam.py measures the whole operator against an open-r1-style scan.
"""

from __future__ import annotations

import numpy as np
from numba import njit

MIX_A = np.uint64(0x9E3779B97F4A7C15)
MIX_B = np.uint64(0xBF58476D1CE4E5B9)
ROLL_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd, so the rolling hash mixes every token
_SHIFT = np.uint64(31)


_PACK_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)


@njit(cache=True, nogil=True)
def pack_tokens(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A uint64 per token, from `words` (the 8 bytes at every byte offset of the buffer).

    Exact for tokens of at most 8 bytes (the bytes packed little-endian, then a bijective
    mix); longer tokens fold every further 8-byte chunk in, so equal tokens always have
    equal values and callers compare long tokens' bytes.
    """
    values = np.empty(starts.size, np.uint64)
    for t in range(starts.size):
        start, length = starts[t], lengths[t]
        acc = words[start] & _PACK_MASKS[min(length, 8)]
        chunk = 8
        while length > chunk:
            acc = (acc * MIX_A) ^ (words[start + chunk] & _PACK_MASKS[min(length - chunk, 8)])
            chunk += 8
        acc *= MIX_A
        acc ^= acc >> _SHIFT
        acc *= MIX_B
        values[t] = acc
    return values


@njit(cache=True, nogil=True)
def close_gaps(
    data: np.ndarray,
    is_token: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    which: np.ndarray,
) -> None:
    """Make the tokens `which` contiguous: move their token bytes left over the non-token
    bytes inside them (thousands separators) and shorten `lengths` to match."""
    for t in which:
        start = starts[t]
        write = start
        for i in range(start, start + lengths[t]):
            if is_token[i]:
                data[write] = data[i]
                write += 1
        lengths[t] = write - start


@njit(cache=True, nogil=True)
def window_hits(
    values: np.ndarray,
    offsets: np.ndarray,
    length: int,
    bitmap: np.ndarray,
    shift: np.uint64,
    table: np.ndarray,
    every: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """First token and hash of each `length`-token window inside one text whose hash is in
    `table` (a sorted set prefiltered by `bitmap` on the hash's top bits), or of every window
    when `every`. The hash is the polynomial sum(values[i + k] * ROLL_BASE**(length-1-k)),
    rolled along each text. Candidates only: callers verify matches token by token.
    """
    top = np.uint64(1)
    for _ in range(length - 1):
        top *= ROLL_BASE
    firsts = np.empty(values.size, np.int64)
    hashes = np.empty(values.size, np.uint64)
    found = 0
    for text in range(offsets.size - 1):
        a, b = offsets[text], offsets[text + 1]
        if b - a < length:
            continue
        h = np.uint64(0)
        for i in range(a, a + length):
            h = h * ROLL_BASE + values[i]
        i = a
        while True:
            hit = every
            if not hit and table.size and bitmap[h >> shift]:
                k = np.searchsorted(table, h)
                hit = k < table.size and table[k] == h
            if hit:
                firsts[found] = i
                hashes[found] = h
                found += 1
            if i + length >= b:
                break
            h = (h - values[i] * top) * ROLL_BASE + values[i + length]
            i += 1
    return firsts[:found].copy(), hashes[:found].copy()
