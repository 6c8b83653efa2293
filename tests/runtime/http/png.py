"""Just enough PNG decoding to count pixels of a colour in a headless-Chromium screenshot
(8-bit RGB/RGBA, not interlaced: what Chromium writes), without an imaging library."""

from __future__ import annotations

import struct
import zlib


def _unfilter(kind: int, line: bytearray, prev: bytes, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = prev[i]
        corner = prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + pred) & 0xFF


def rgb_rows(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour, _c, _f, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8, depth
    assert colour in (2, 6), colour
    assert interlace == 0
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytes(stride)
    for y in range(height):
        start = y * (stride + 1)
        line = bytearray(raw[start + 1 : start + 1 + stride])
        _unfilter(raw[start], line, prev, bpp)
        prev = bytes(line)
        rows.append(bytes(line) if bpp == 3 else bytes(b for i, b in enumerate(line) if i % 4 != 3))
    return width, height, rows


def count_colour(data: bytes, rgb: tuple[int, int, int], tolerance: int = 24) -> int:
    """Pixels within ``tolerance`` (per channel) of ``rgb``."""
    _w, _h, rows = rgb_rows(data)
    r0, g0, b0 = rgb
    hits = 0
    for row in rows:
        for i in range(0, len(row), 3):
            if (
                abs(row[i] - r0) <= tolerance
                and abs(row[i + 1] - g0) <= tolerance
                and abs(row[i + 2] - b0) <= tolerance
            ):
                hits += 1
    return hits
