"""Read the records of an offline W&B run file (``run-<id>.wandb``) without the network.

The file is a LevelDB-style log (what ``wandb sync`` uploads): a 7-byte header ``:W&B`` + magic +
version, then 32 KiB blocks of chunks ``crc32 (4) | length (2) | type (1) | data``, chunks of one
record typed FULL or FIRST/MIDDLE*/LAST. Each record is a ``wandb_internal_pb2.Record``.
"""

from __future__ import annotations

import struct
from pathlib import Path

BLOCK = 32768
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: str | Path) -> list:
    """Every protobuf ``Record`` in ``path``, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B run file"
    out, pos, buf = [], HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0 and length == 0:
            continue
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        if kind in (FULL, LAST):
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def finished_records(path: str | Path, timeout: float = 60.0) -> list:
    """Every record of ``path`` once it holds the ``exit`` record that ``run.finish`` writes last.

    ``run.finish`` returns once W&B's service has the exit record, and the service may write the file a
    moment later; reading at once can miss the summary records before it (a loaded 2-core machine).
    Raises ``AssertionError`` when no exit record appears within ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        recs = records(path) if Path(path).exists() else []
        if any(r.WhichOneof("record_type") == "exit" for r in recs):
            return recs
        assert time.monotonic() < deadline, f"{path}: no exit record after {timeout:.0f} s"
        time.sleep(0.2)


def exit_codes(path: str | Path) -> list[int]:
    """Exit codes recorded by ``run.finish`` (one per finish; empty if the run never finished)."""
    return [r.exit.exit_code for r in records(path) if r.WhichOneof("record_type") == "exit"]
