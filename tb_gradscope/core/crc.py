"""TFRecord's masked CRC32C in pure Python, eight bytes a step.

TensorBoard's own framing (`tensorboard.summary.writer.record_writer`) computes
the same checksum a byte at a time (~96 us for a 300-byte record here): the
largest cost of a recorded PyTorch step's writes. Four lookups in 16-bit
tables per eight bytes (slicing-by-8 with byte pairs merged; 1 MB of tables,
built on first use in ~60 ms) give the same value ~3x faster (~31 us),
still without TensorFlow or a C extension.
"""

from __future__ import annotations

import array
import functools
import struct
from collections.abc import Sequence

_POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected
_MASK_DELTA = 0xA282EAD8


def _tables() -> tuple[tuple[int, ...], ...]:
    """The eight slicing-by-8 tables of CRC32C (table k: a byte followed by k zero bytes)."""
    first = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[i] >> 8) ^ first[prev[i] & 0xFF] for i in range(256)])
    return tuple(tuple(t) for t in tables)


@functools.cache
def _wide_tables() -> tuple[Sequence[int], ...]:
    """Per 16-bit half of the two words of an 8-byte step, the XOR of its two bytes' lookups."""
    t = _tables()

    def merged(low: Sequence[int], high: Sequence[int]) -> array.array:
        return array.array("I", [low[i & 0xFF] ^ high[i >> 8] for i in range(65536)])

    return t[0], merged(t[7], t[6]), merged(t[5], t[4]), merged(t[3], t[2]), merged(t[1], t[0])


def crc32c(data: bytes) -> int:
    """The CRC32C of `data`."""
    byte_table, a, b, c, d = _wide_tables()
    crc = 0xFFFFFFFF
    n = len(data) - len(data) % 8
    for one, two in struct.iter_unpack("<II", memoryview(data)[:n]):
        one ^= crc
        crc = a[one & 0xFFFF] ^ b[one >> 16] ^ c[two & 0xFFFF] ^ d[two >> 16]
    for byte in data[n:]:
        crc = byte_table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C: rotated right by 15 bits plus a constant."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class FramedRecords:
    """TFRecord framing over a binary file: length, its masked CRC, the data, its masked CRC.

    Byte for byte what TensorBoard's `RecordWriter` writes."""

    def __init__(self, path: str):
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()

    def write(self, data: bytes) -> None:
        header = struct.pack("<Q", len(data))
        self._file.write(
            header
            + struct.pack("<I", masked_crc32c(header))
            + data
            + struct.pack("<I", masked_crc32c(data))
        )

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
