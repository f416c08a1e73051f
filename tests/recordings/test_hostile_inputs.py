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


def _under_address_limit(code, *args, limit=3 << 30):
    """Run ``code`` in a child with RLIMIT_AS ``limit`` (well under the 8 GiB snapshot cap)."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    return subprocess.run([sys.executable, "-c", prelude + code, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_small_snapshot_loads_under_an_address_space_limit(tmp_path):
    # reading "up to the cap" used to ask for 8 GiB first: MemoryError under ulimit -v
    path = tmp_path / "small.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))
    out = _under_address_limit("import sys\nfrom gpumemlab.recordings.files import load_snapshot"
                               "\nprint(len(load_snapshot(sys.argv[1])['device_traces']))", path)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr[-300:]


def test_a_certificate_reads_under_an_address_space_limit(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"format": "gpumemlab-certificate/1"}')
    out = _under_address_limit(
        "import sys\nfrom gpumemlab.certificates.record import load_certificate, CertificateError"
        "\ntry:\n    load_certificate(sys.argv[1])\nexcept CertificateError as e:\n    print(e)",
        path)
    assert out.returncode == 0 and "payload is missing" in out.stdout, out.stderr[-300:]


def test_a_file_that_grows_past_the_cap_while_read_is_refused(tmp_path, monkeypatch):
    from gpumemlab.recordings import bounded_read

    path = tmp_path / "grows.json"
    path.write_bytes(b"[]")
    real_read = os.read

    def growing_read(fd, n):        # the file gains 1 KiB before each read
        with open(path, "ab") as f:
            f.write(b" " * 1024)
        return real_read(fd, n)

    monkeypatch.setattr(bounded_read.os, "read", growing_read)
    with pytest.raises(SnapshotError, match="larger than the 4096-byte limit"):
        load_snapshot(path, max_bytes=4096)


@pytest.mark.parametrize("make", ["/dev/zero", "fifo", "directory"])
def test_certificate_verify_refuses_devices_fifos_and_folders_as_file_or_key(tmp_path, capsys, make):
    from gpumemlab.certificates.record import generate_keypair, issue_certificate
    from gpumemlab.cli import main as cli

    priv, pub = generate_keypair(tmp_path / "keys")
    target = make if make.startswith("/") else tmp_path / "cert.html"
    if make == "fifo":
        os.mkfifo(target)
    elif make == "directory":
        target.mkdir()
    page = issue_certificate("Ada", "GPU 101", 9, 10, "2025-05-01", priv).write(
        tmp_path / "issued", "ada", png=False)["html"]
    for argv in ([str(target), "--key", str(pub)], [str(page), "--key", str(target)]):
        done = []
        t = threading.Thread(target=lambda a=argv: done.append(
            cli(["certificate", "verify", *a])), daemon=True)
        t.start()
        t.join(10)
        assert done == [2], f"certificate verify {argv} blocked or did not refuse"
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ("not a regular file" in err or "directory" in err), err


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


# ----------------------------------------------------------------------------- replay cost

def _map_cycles(cycles, size=3 << 40):
    """A recording of segment_map/alloc/free/segment_unmap cycles of a terabyte-sized tensor
    (157,000 large pages a map): a few KB of file."""
    from gpumemlab.allocator import DeviceCachingAllocator
    from gpumemlab.allocator.config import AllocatorConfig

    alloc = DeviceCachingAllocator(1 << 42, AllocatorConfig.parse("expandable_segments:True"),
                                   record_context=None)
    for _ in range(cycles):
        alloc.free(alloc.malloc(size))
        alloc.empty_cache()
    return alloc.snapshot()


def test_expandable_pages_are_kept_as_ranges_not_one_entry_per_page():
    # (bench_hostile_inputs.py times the replay: 0.45 s for 5 KB before, per-page loops)
    import tracemalloc

    from gpumemlab.allocator.driver import CudaDriver
    from gpumemlab.allocator.expandable_segment import ExpandableSegment

    page = 2 << 20
    driver = CudaDriver(1 << 50)
    es = ExpandableSegment(driver, 0, 1 << 45, page)
    tracemalloc.start()
    try:
        assert es.map(es.ptr, 1 << 44) == (es.ptr, 1 << 44)          # 2**23 pages
        assert es.map(es.ptr + (1 << 44), 3 * page) == (es.ptr + (1 << 44), 3 * page)
        assert es.unmap(es.ptr + page + 1, 1 << 43) == (es.ptr + 2 * page, (1 << 43) - page)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10     # a list entry per page was 64 MiB here
    assert es.mapped_ranges() == [(0, 2), ((1 << 43) // page + 1, (1 << 44) // page + 3)]
    assert es.mapped_pages() * page == driver.used_bytes
    with pytest.raises(AssertionError, match="already mapped"):
        es.map(es.ptr + page, page)
    with pytest.raises(AssertionError, match="not mapped"):
        es.unmap(es.ptr + page, 2 * page)


def test_a_terabyte_map_unmap_recording_replays_exactly():
    from gpumemlab.recordings.replay import replay

    data = pickle.dumps(_map_cycles(8))
    result = replay(loads_snapshot(data, name="cycles.pickle"))
    assert len(data) < 4096 and result.allocations == 8
    assert result.reproduced and result.segment_mismatches == 0
    assert result.timeline.reserved[-1] == 0


# ----------------------------------------------------------------------------- CLI output

_ESC = "\x1b[2J\x1b[H\x1b[1A\r[PASS] all good\u202e\ud800"   # clear, home, up, overwrite


def _escaping_snapshot(tmp_path):
    """The train-step fixture with terminal escapes in every frame's names and in metadata."""
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "snapshots" / "sim_train_step_like.pickle"
    snap = pickle.loads(fixture.read_bytes())
    for seg in snap["segments"]:
        for b in seg["blocks"]:
            for f in b.get("frames") or []:
                f["name"], f["filename"] = _ESC + f["name"], "/home/" + _ESC + "/train.py"
    for e in snap["device_traces"][0]:
        e["user_metadata"] = _ESC
        for f in e.get("frames") or []:
            f["name"] = _ESC
    path = tmp_path / ("snap" + "\x1b[2J" + ".pickle")    # a hostile file name too
    path.write_bytes(pickle.dumps(snap))
    return path


@pytest.mark.parametrize("command", [["report"], ["verify"], ["doctor", "--no-search"], ["diff"],
                                     ["replay", "--alloc-conf", "expandable_segments:True"],
                                     ["report", "--range", "0:50"]])
def test_terminal_escapes_from_a_snapshot_never_reach_the_terminal(tmp_path, capsys, command):
    from gpumemlab.cli import main

    path = str(_escaping_snapshot(tmp_path))
    argv = command[:1] + [path] + ([path] if command[0] == "diff" else []) + command[1:]
    status = main(argv)
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert status in (0, 1), text[-500:]
    assert not any(c in text for c in "\x1b\r\u202e\ud800")   # no ESC, CR, bidi, surrogate
    if command[0] != "replay":         # (its table shows no string from the file)
        assert "\\x1b[2J" in text      # shown, visibly, instead
    text.encode("utf-8")               # printable on any UTF-8 terminal


def test_an_escape_in_an_error_line_is_shown_not_run(tmp_path, capsys):
    from gpumemlab.cli import main

    path = tmp_path / "x.json"
    path.write_text('{"\\u001b[2Jsegs": []}')
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2Jsegs" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", ["report", "verify", "doctor", "diff", "replay"])
def test_a_huge_integer_or_deep_value_is_one_line_from_every_command(tmp_path, capsys, command):
    # the doctor died with a TypeError traceback on a 5,000-digit size; others printed nonsense
    from gpumemlab.cli import main

    entry = {"action": "alloc", "addr": 1 << 40, "size": 10 ** 5000, "stream": 0, "time_us": 0}
    huge = tmp_path / "huge.pickle"
    huge.write_bytes(pickle.dumps({"segments": [], "device_traces": [[entry]]}))
    deep = tmp_path / "deep.pickle"
    deep.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=2)[:-1]
                     .replace(b"]q\x02", b"(" * 5000 + b"N" + b"l" * 5000 + b"q\x02") + b".")
    for path, words in ((huge, "an integer of about 5001 digits"), (deep, "nested more than")):
        argv = [command, str(path)] + ([str(path)] if command == "diff" else [])
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err and str(path) in err, err


def test_a_few_hundred_bytes_cannot_ask_the_start_state_for_millions_of_mallocs():
    # a small-pool expandable segment is rebuilt 1 MiB a malloc: 256 GiB in 470 bytes of file
    # took 20 s; past a bound set by the snapshot's size it is a start problem instead
    from gpumemlab.recordings.replay import replay

    base, size = 0x7F0000000000, 64 << 30
    seg = {"address": base, "total_size": size, "stream": 0, "segment_type": "small",
           "is_expandable": True, "blocks": [{"address": base, "size": size,
                                              "requested_size": 0, "state": "inactive"}]}
    snap = {"segments": [seg], "device_traces": [[
        {"action": "alloc", "addr": base + size + (1 << 30), "size": 512, "stream": 0}]],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                               "expandable_segments": True}}
    with pytest.warns(Warning):
        result = replay(loads_snapshot(pickle.dumps(snap)))
    assert len(pickle.dumps(snap)) < 1024
    assert any("small-pool mallocs" in p and "not rebuilt" in p for p in result.start_problems)


def test_the_unmap_index_finds_what_a_scan_of_every_cached_block_finds():
    import random

    from gpumemlab.allocator import DeviceCachingAllocator
    from gpumemlab.allocator.config import AllocatorConfig
    from gpumemlab.recordings.replay.releases import FreePages, _release_recorded, _whole_pages

    def scan(alloc, addr, size):      # the copy-and-scan this index replaced
        for pool in alloc.all_block_pools():
            for blk in list(pool.by_ptr.values()):
                if blk.expandable_segment is not None and blk.ptr <= addr < blk.ptr + blk.size:
                    return blk if _whole_pages(blk) == (addr, size) else None
        return None

    def indexed(pages, addr, size):
        blk = pages.find(addr)
        return blk if blk is not None and _whole_pages(blk) == (addr, size) else None

    rng = random.Random(3)
    alloc = DeviceCachingAllocator(64 << 30, AllocatorConfig.parse("expandable_segments:True"),
                                   record_context=None)
    live, checked, released = [], 0, 0
    for step in range(1500):
        if live and rng.random() < 0.47:
            alloc.free(live.pop(rng.randrange(len(live))))
        else:
            live.append(alloc.malloc(rng.choice([rng.randint(1, 1 << 20),
                                                 rng.randint(1 << 20, 90 << 20)])))
        if step % 50:
            continue
        pages = FreePages(alloc)
        for pool in alloc.all_block_pools():
            for blk in list(pool.by_ptr.values()):
                lo, nbytes = _whole_pages(blk)
                page = blk.expandable_segment.segment_size
                for addr in (lo, blk.ptr, lo + page, blk.ptr + 512):
                    for size in (nbytes, nbytes - page, page):
                        found = indexed(pages, addr, size)
                        assert found is scan(alloc, addr, size)
                        checked += found is not None
        # a burst: each unmap through the same index, then the same ranges again (now gone)
        ranges = [_whole_pages(b) for pool in alloc.all_block_pools()
                  for b in pool.by_ptr.values() if _whole_pages(b)[1] > 0][:4]
        for addr, size in ranges + ranges:
            expected = scan(alloc, addr, size)
            assert _release_recorded(alloc, "segment_unmap", addr, size, pages) is expected
            released += expected is not None
    assert checked > 50 and released > 5     # real free pages were asked about, not only misses


def test_an_escape_echoed_by_a_usage_error_is_shown_not_run(capsys):
    from gpumemlab.cli import main

    with pytest.raises(SystemExit):
        main(["report", "a.pickle", "--top", "\x1b[2Jten"])
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[2Jten" in err


def test_doctor_message_file_refuses_devices_fifos_and_huge_files_at_once(tmp_path, capsys):
    from gpumemlab.cli import main
    from gpumemlab.cli.doctor import MESSAGE_LIMIT

    fifo = tmp_path / "oom.txt"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (MESSAGE_LIMIT + 1))
    for path, why in (("/dev/zero", "not a regular file"), (fifo, "not a regular file"),
                      (big, "larger than")):
        done = []
        t = threading.Thread(target=lambda: done.append(main(["doctor", "--message-file",
                                                              str(path)])), daemon=True)
        t.start()
        t.join(20)
        assert done == [2], f"doctor --message-file {path} blocked or did not refuse"
        err = capsys.readouterr().err.strip()
        assert why in err and len(err.splitlines()) == 1
