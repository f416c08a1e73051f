"""Hostile files outside the classroom: crafted pickles, device files, certificate pages."""
import os
import pickle
import resource
import threading

import pytest

from gpumemlab.recordings.files import SnapshotError, load_snapshot, loads_snapshot
from gpumemlab.recordings.unpickle import CHECKED_BYTES, CheckedUnpickler


@pytest.mark.parametrize("index", [2**27, 2**28, 2**32 - 1])
def test_a_memo_index_larger_than_the_file_is_refused_without_allocating(index):
    data = b"\x80\x04N" + b"r" + index.to_bytes(4, "little") + b"."   # LONG_BINPUT
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SnapshotError, match="memo index .* larger than the file"):
        loads_snapshot(data, name="crafted.pickle")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 << 10   # the C unpickler takes 2-4 GiB here


@pytest.mark.parametrize("op", [b"p99999999\n", b"q\xff"])
def test_text_and_one_byte_memo_puts_are_checked_too(op):
    data = b"(lp0\n" if op.startswith(b"p") else b"\x80\x02]"
    with pytest.raises(SnapshotError, match="memo index"):
        loads_snapshot(data + op + b".")


def test_the_checked_unpickler_reads_real_snapshots_like_the_c_one():
    snap = {"segments": [{"address": 1 << 40, "total_size": 2 << 20, "blocks": [
        {"address": 1 << 40, "size": 2 << 20, "state": "inactive", "frames": []}]}],
        "device_traces": [[{"action": "alloc", "addr": 1 << 40, "size": 512}] * 3]}
    for protocol in range(0, pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(snap, protocol=protocol)
        assert CheckedUnpickler(data).load() == pickle.loads(data)


def test_a_big_crafted_pickle_fails_under_the_address_space_limit():
    pad = pickle.dumps({"segments": [], "pad": "x" * (CHECKED_BYTES + 1024)}, protocol=2)
    data = pad[:-1] + b"r" + (2**31).to_bytes(4, "little") + b"."
    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(SnapshotError, match="more memory"):
        loads_snapshot(data)
    assert resource.getrlimit(resource.RLIMIT_AS) == before   # the limit is put back


def test_device_files_and_fifos_are_refused_in_one_line(tmp_path):
    with pytest.raises(SnapshotError, match="not a regular file") as exc:
        load_snapshot("/dev/zero")
    assert "\n" not in str(exc.value)
    fifo = tmp_path / "snap.pickle"
    os.mkfifo(fifo)
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(SnapshotError, load_snapshot,
                                                                  fifo)), daemon=True)
    t.start()
    t.join(10)
    assert done, "load_snapshot blocked on a FIFO"


@pytest.mark.parametrize("unit", ['<script type="application/json" id="gml-certificate">',
                                  "<script", "</script ", "<script id=gml-certificate>{}"])
def test_a_page_of_unclosed_certificate_tags_is_no_certificate(tmp_path, unit):
    # (bench_hostile_inputs.py times this: the old regex took minutes on such a page)
    from gpumemlab.certificates.keys import CertificateError
    from gpumemlab.certificates.record import load_certificate

    page = tmp_path / "page.html"
    page.write_text(unit * ((4 << 20) // len(unit) - 1))
    with pytest.raises(CertificateError, match="no certificate data"):
        load_certificate(page)
