"""Damaged gradscope logdirs for tests/e2e/reliability/test_reliability_logs.py.

Each run of `write_damaged_logdir` is a real event file written by
tests/support/plugin_fixtures.write_run (the recorder's own write pattern), then
damaged the way real runs are: training killed mid-write (the last record cut
short), a flipped byte in one record's payload (bad CRC), an empty file, a
file of random bytes, a record of a future format version, and two writers
over the same steps (a run resumed from a checkpoint). `INTACT` says, per
run, which steps every reader must still serve.
"""

from __future__ import annotations

import glob
import json
import os
import struct

import numpy as np

from tb_gradscope import format as fmt
from tests.support import plugin_fixtures as pf

STEPS = range(0, 12)
RESUME_FROM = 6  # the resumed writer rewrites steps RESUME_FROM.. and goes on
RESUMED_STEPS = range(RESUME_FROM, 18)

CLEAN = "clean"
TRUNCATED = "truncated"  # the last record cut in half
BAD_CRC = "bad_crc"  # a byte flipped inside the record of one step mid-file
EMPTY = "empty"  # a zero-byte event file next to nothing else
RANDOM = "random"  # random bytes under an event-file name
FUTURE = "future"  # one loss written by a newer format version
RESUMED = "resumed"  # two writers, overlapping steps

SPEC = pf.RunSpec(steps=STEPS, events=False)


def event_file(logdir: str, run: str) -> str:
    (path,) = glob.glob(os.path.join(logdir, run, "*tfevents*"))
    return path


def records(path: str) -> list[tuple[int, int]]:
    """(offset, total length) of each TFRecord in an intact event file."""
    out, data, pos = [], open(path, "rb").read(), 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        out.append((pos, 12 + length + 4))
        pos += 12 + length + 4
    return out


def write_damaged_logdir(root: str) -> dict[str, list[int]]:
    """Writes every damaged run under `root`; returns {run: steps that must be served}."""
    intact: dict[str, list[int]] = {}
    for run in (CLEAN, TRUNCATED, BAD_CRC):
        pf.write_run(root, run, SPEC)
        intact[run] = list(STEPS)

    # Killed mid-write: the last record (the last step's last table) half written.
    path = event_file(root, TRUNCATED)
    offset, length = records(path)[-1]
    with open(path, "r+b") as f:
        f.truncate(offset + length // 2)
    intact[TRUNCATED] = list(STEPS)[:-1]  # the last step lost one of its tables

    # A flipped byte in the payload of a record in the middle of the file.
    path = event_file(root, BAD_CRC)
    recs = records(path)
    offset, length = recs[len(recs) // 2]
    with open(path, "r+b") as f:
        f.seek(offset + 12 + (length - 16) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    intact[BAD_CRC] = None  # which steps survive depends on the backend; see tests

    for run, content in ((EMPTY, b""), (RANDOM, np.random.default_rng(0).bytes(4096))):
        os.makedirs(os.path.join(root, run))
        with open(os.path.join(root, run, f"events.out.tfevents.0.{run}"), "wb") as f:
            f.write(content)

    _write_future_loss(root, FUTURE)
    intact[FUTURE] = list(STEPS)

    # Resumed from a checkpoint: a second writer (a second file) rewrites
    # steps RESUME_FROM.. with the same record layout and continues.
    pf.write_run(root, RESUMED, SPEC)
    import time

    time.sleep(1.1)  # event files are ordered by their name's timestamp
    pf.write_run(root, RESUMED, pf.RunSpec(steps=RESUMED_STEPS, events=False))
    intact[RESUMED] = sorted(set(STEPS) | set(RESUMED_STEPS))
    return intact


def _write_future_loss(root: str, run: str) -> None:
    """The standard run plus, in the same file, a loss 'next' whose metadata
    says format version FORMAT_VERSION + 1."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(os.path.join(root, run))
    pf.write_run(root, run, SPEC, writer=writer, first=set())

    info = fmt.make_info(fmt.Kind.GRAD_STATS, "next", pf.SCOPES)
    meta = fmt.create_summary_metadata(info)
    content = json.loads(meta.plugin_data.content)
    content["version"] = fmt.FORMAT_VERSION + 1
    meta.plugin_data.content = json.dumps(content).encode()
    with writer.as_default():
        for step in STEPS:
            tf.summary.write(
                fmt.tag_for(fmt.Kind.GRAD_STATS, "next", 0),
                pf.grad_table("td", pf.SCOPES, step),
                step=step,
                metadata=meta.SerializeToString() if step == 0 else b"",
            )
    writer.close()
