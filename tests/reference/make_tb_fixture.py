#!/usr/bin/env python3
"""make_tb_fixture.py — the TensorBoard fixture for v2183 (tests/unit/test_tboard_v2183.c), made
offline with the `tensorboard` PyPI package (CI never runs this; it needs only the JSON it wrote).

Writes a few Events with TensorBoard's own writer (EventFileWriter: its TFRecord framing, its
masked CRC-32C, protobuf's serialization), reads the file back with TensorBoard's EventAccumulator,
and commits tests/reference/tb_v2183.json: each record's inputs (wall_time, step, file_version,
scalars, session START), the exact framed bytes (hex) TensorBoard wrote for it, and the scalars as
EventAccumulator loads them. The C test encodes the same inputs with runtime/obs/tboard.c and
compares bytes.

    python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard
    /tmp/tbvenv/bin/python tests/reference/make_tb_fixture.py
"""
import json
import os
import struct
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

# the inputs; values are exactly representable as float32 where it matters for reading back
RECORDS = [
    {"wall_time": 1764067200.25, "step": 1,
     "scalars": [["train/loss", 5.5], ["train/lr", 0.0006], ["train/grad_norm", 1.25],
                 ["perf/tokens_per_s", 51234.5], ["perf/mfu", 0.4125], ["memory/peak_rss_mib", 812.0]]},
    {"wall_time": 1764067200.75, "step": 2,
     "scalars": [["train/loss", 4.75], ["train/lr", 0.0006], ["val/loss", 4.875]]},
    {"wall_time": 1764067201.5, "step": 300, "session_start": True, "scalars": []},
    {"wall_time": 1764067201.5, "step": 300, "scalars": [["train/loss", 3.25]]},
]


def event_of(r):
    ev = event_pb2.Event(wall_time=r["wall_time"], step=r["step"])
    if r.get("file_version"):
        ev.file_version = r["file_version"]
    if r["scalars"]:
        ev.summary.CopyFrom(summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=t, simple_value=v) for t, v in r["scalars"]]))
    if r.get("session_start"):
        ev.session_log.status = event_pb2.SessionLog.START
    return ev


def split_records(data):
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        out.append(data[i:i + 16 + n])
        i += 16 + n
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as d:
        w = EventFileWriter(d)   # writes its own file_version event first
        for r in RECORDS:
            w.add_event(event_of(r))
        w.close()
        (name,) = [f for f in os.listdir(d) if f.startswith("events.out.tfevents.")]
        path = os.path.join(d, name)
        raw = split_records(open(path, "rb").read())
        first = event_pb2.Event.FromString(raw[0][12:-4])
        ea = event_accumulator.EventAccumulator(path, size_guidance={event_accumulator.SCALARS: 0})
        ea.Reload()
        loaded = {tag: [[e.step, e.value] for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}
    recs = [{"wall_time": first.wall_time, "step": 0, "file_version": first.file_version, "scalars": [],
             "hex": raw[0].hex()}]
    for r, b in zip(RECORDS, raw[1:]):
        recs.append(dict(r, hex=b.hex()))
    out = {"made_by": "tests/reference/make_tb_fixture.py with tensorboard " + __import__("tensorboard").__version__,
           "records": recs, "event_accumulator_scalars": loaded}
    with open(os.path.join(here, "tb_v2183.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.join(here, "tb_v2183.json"), len(recs), "records;",
          "EventAccumulator:", {k: len(v) for k, v in loaded.items()}, file=sys.stderr)


if __name__ == "__main__":
    main()
