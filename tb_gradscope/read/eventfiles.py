"""Event files TensorBoard's loaders must not be handed whole, and damage they hide.

Before the command line hands a logdir to TensorBoard's ingestion, every file
named like an event file is checked with `stat` and record headers only: a FIFO
would block the loader forever, and a record header claiming more bytes than
an event can hold makes the Python loader raise MemoryError (the Rust data
server aborts). `mirror_safe_part` gives the loader only what is safe.
`damaged_event_files` says what both loaders silently stop reading at.
TFRecord framing: u64 length, u32 masked CRC of the length, data, u32 masked
CRC of the data. Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import stat
import struct
from collections.abc import Mapping

# No event can be this long (protobuf messages stop at 2 GiB): a record header
# claiming more is damage, and TensorBoard's loaders would try to allocate it
# (the Python one raises MemoryError, the Rust data server aborts).
MAX_RECORD_BYTES = 2**31


@dataclasses.dataclass(frozen=True)
class UnsafeFile:
    """An event file TensorBoard's loader must not be handed as it is.

    `keep` is how many leading bytes are safe to read (None: none, the file
    is not a regular file: a FIFO would block the loader forever)."""

    run: str
    path: str
    keep: int | None
    message: str


def unsafe_event_files(logdir: str) -> dict[str, UnsafeFile]:
    """{path: problem} of event files named like TensorBoard's under `logdir`
    that are not regular files, or whose record header claims more bytes
    than any event can hold. Checked with stat and record headers only, so
    neither a FIFO nor a huge file is read."""
    found = {}
    for directory, _, names in os.walk(logdir):
        run = os.path.relpath(directory, logdir)
        run = "." if run == os.curdir else run
        for name in sorted(n for n in names if "tfevents" in n):
            path = os.path.join(directory, name)
            try:
                mode = os.stat(path).st_mode
            except OSError as e:
                found[path] = UnsafeFile(
                    run,
                    path,
                    None,
                    f"run {run!r}: event file {name!r} cannot be read ({e.strerror}): skipped",
                )
                continue
            if not stat.S_ISREG(mode):
                what = (
                    "a FIFO"
                    if stat.S_ISFIFO(mode)
                    else "a device"
                    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file"
                )
                found[path] = UnsafeFile(
                    run, path, None, f"run {run!r}: event file {name!r} is {what}: not read"
                )
                continue
            oversized = _oversized_record(path)
            if oversized is not None:
                offset, n, length = oversized
                found[path] = UnsafeFile(
                    run,
                    path,
                    offset,
                    f"run {run!r}: event file {name!r} is damaged: record {n} (byte {offset}) claims "
                    f"{length} bytes, more than an event can hold; only the {n} records before it are read",
                )
    return found


def _oversized_record(path: str) -> tuple[int, int, int] | None:
    """(offset, index, claimed length) of the first record whose header
    (with a valid CRC, as TensorBoard checks it) claims MAX_RECORD_BYTES or more."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            pos, n = 0, 0
            while pos + 12 <= size:
                f.seek(pos)
                header = f.read(12)
                (length,) = struct.unpack("<Q", header[:8])
                if struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
                    return None  # TensorBoard stops here without allocating
                if length >= MAX_RECORD_BYTES:
                    return pos, n, length
                pos, n = pos + 16 + length, n + 1
    except OSError:
        return None
    return None


def mirror_safe_part(logdir: str, mirror: str, unsafe: Mapping[str, UnsafeFile]) -> None:
    """Recreates the runs of `logdir` under `mirror` from symlinks to its safe
    event files and copies of the safe prefix of the damaged ones."""
    for directory, _, names in os.walk(logdir):
        target = os.path.join(mirror, os.path.relpath(directory, logdir))
        for name in (n for n in names if "tfevents" in n):
            path = os.path.join(directory, name)
            os.makedirs(target, exist_ok=True)
            problem = unsafe.get(path)
            if problem is None:
                os.symlink(os.path.abspath(path), os.path.join(target, name))
            elif problem.keep:
                with open(path, "rb") as src, open(os.path.join(target, name), "wb") as dst:
                    _copy_prefix(src, dst, problem.keep)


def _copy_prefix(src, dst, size: int, chunk: int = 1 << 20) -> None:
    while size > 0:
        data = src.read(min(chunk, size))
        if not data:
            return
        dst.write(data)
        size -= len(data)


# Data CRCs are checked in pure Python (TensorBoard's stub): up to this many
# bytes per file; beyond it, only the framing and the length CRCs.
CRC_CHECK_BYTES = 64 << 20


def damaged_event_files(logdir: str, run: str) -> list[str]:
    """Warnings for event files of `run` that TensorBoard stops reading early.

    Both data providers stop reading an event file at its first damaged
    record (bad CRC, bad length) and say nothing to the plugin, so whatever
    follows is lost; a record cut short at the end (training killed mid-write,
    or a writer still writing) loses only itself. TFRecord framing: u64 length,
    u32 masked CRC of the length, data, u32 masked CRC of the data.
    """
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    found = []
    run_dir = os.path.join(logdir, run)
    for path in sorted(glob.glob(os.path.join(glob.escape(run_dir), "*tfevents*"))):
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        pos, n, problem = 0, 0, None
        while pos < len(data) and problem is None:
            header = data[pos : pos + 12]
            if len(header) < 12:
                problem = "its last record is cut short (killed mid-write?)"
                break
            (length,) = struct.unpack("<Q", header[:8])
            if struct.unpack("<I", header[8:])[0] != masked_crc32c(header[:8]):
                problem = f"record {n} (byte {pos}) has a bad length CRC"
            elif length >= MAX_RECORD_BYTES:
                problem = (
                    f"record {n} (byte {pos}) claims {length} bytes, more than an event can hold"
                )
            elif pos + 16 + length > len(data):
                problem = "its last record is cut short (killed mid-write?)"
            elif pos + length <= CRC_CHECK_BYTES and struct.unpack(
                "<I", data[pos + 12 + length : pos + 16 + length]
            )[0] != masked_crc32c(data[pos + 12 : pos + 12 + length]):
                problem = f"record {n} (byte {pos}) has a bad data CRC"
            else:
                pos, n = pos + 16 + length, n + 1
        if problem is None:
            continue
        rest = len(data) - pos
        lost = (
            ""
            if "cut short" in problem
            else f"; TensorBoard reads no further: {rest} bytes after it are not shown"
        )
        found.append(
            f"run {run!r}: event file {os.path.basename(path)!r} is damaged: {problem}{lost}"
        )
    return found
