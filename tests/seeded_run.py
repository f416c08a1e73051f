"""A seeded simulated-GPU run whose full snapshot (segments, trace, frames) is stored in
tests/fixtures/snapshots/seeded_run.json.gz and compared by tests/devices/test_seeded_snapshot.py.

Every allocation is made at least 12 Python frames deep inside this file, so the 12 frames the
simulated GPU records all come from here; their file name is stored as "<seeded_run>". Editing
this file moves line numbers: regenerate the fixture (``python tests/seeded_run.py``) only when
the recorded behaviour is meant to change.
"""
from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "snapshots" / "seeded_run.json.gz"
MiB = 1024 * 1024


def _deep(depth, fn, *args):
    if depth > 0:
        return _deep(depth - 1, fn, *args)
    return fn(*args)


def _allocate(gpu, nbytes, stream):
    return gpu.empty(nbytes, stream=stream)


def _release(allocation):
    allocation.free()


def run(alloc_conf: str = "") -> dict:
    """The run; returns its snapshot with this file's path replaced by "<seeded_run>"."""
    import gpumemlab as gml

    rng = random.Random(13)
    gpu = gml.SimulatedGPU("1GiB", alloc_conf=alloc_conf)
    live = []
    for step in range(120):
        if step == 40:
            gpu.set_memory_metadata("phase 2")
        if step == 80:
            _deep(12 + rng.randrange(4), gpu.empty_cache)
        if live and (rng.random() < 0.45 or len(live) > 25):
            allocation = live.pop(rng.randrange(len(live)))
            if rng.random() < 0.1:
                gpu.record_stream(allocation, 1)
            _deep(12 + rng.randrange(4), _release, allocation)
        else:
            r = rng.random()
            nbytes = (rng.randint(1, 256 * 1024) if r < 0.5 else rng.randint(1, 24) * MiB
                      if r < 0.95 else rng.randint(64, 160) * MiB)
            live.append(_deep(12 + rng.randrange(4), _allocate, gpu, nbytes, rng.randrange(2)))
    try:
        _deep(12, _allocate, gpu, 2 * 1024 * MiB, 0)
    except gml.OutOfMemoryError:
        pass
    snap = gpu.snapshot()
    text = json.dumps(snap).replace(json.dumps(str(Path(__file__).resolve()))[1:-1],
                                    "<seeded_run>")
    return json.loads(text)


def runs() -> dict:
    return {"default": run(""), "expandable": run("expandable_segments:True")}


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    text = json.dumps(runs(), separators=(",", ":"), sort_keys=True) + "\n"
    FIXTURE.write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size:,} bytes)")


def load_fixture() -> dict:
    return json.loads(gzip.decompress(FIXTURE.read_bytes()))
