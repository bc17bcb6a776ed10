"""TFRecord framing with its masked CRC32C computed in C (`google-crc32c`).

TensorBoard's own framing (`tensorboard.summary.writer.record_writer`)
computes the checksum in pure Python a byte at a time (~96 us for a
300-byte record here), which was the largest cost of a recorded PyTorch
step's writes; `google_crc32c.value` gives the same value in ~0.1 us.
"""

from __future__ import annotations

import struct

import google_crc32c

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC32C: the CRC32C rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
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
