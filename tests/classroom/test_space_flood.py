"""The disk watchdog's count of a run's folder (found by a fresh-eyes hostile review): a flood of
empty files at the top of the folder once stopped the walk before it reached the 32 files of
32 MiB written below them, and a run wrote 1024 MiB against its 256 MiB."""
from gpumemlab.classroom.isolation import space


def _flood(tmp_path, empties: int, big_bytes: int):
    for i in range(empties):
        (tmp_path / f"e{i:04d}").touch()
    below = tmp_path / "zz_below"
    below.mkdir()
    with open(below / "big", "wb") as f:
        f.write(b"x" * big_bytes)


def test_a_folder_past_the_entry_limit_is_over_any_run_limit(tmp_path):
    _flood(tmp_path, empties=50, big_bytes=1 << 20)
    counted = space.folder_bytes(tmp_path, limit_entries=20)
    # before: 4 KiB past the limit, the 1 MiB below never seen
    assert counted > space.RUN_DISK_BYTES + (1 << 20)


def test_a_folder_under_the_entry_limit_is_counted_by_its_blocks(tmp_path):
    _flood(tmp_path, empties=5, big_bytes=1 << 20)
    counted = space.folder_bytes(tmp_path, limit_entries=20)
    assert (1 << 20) <= counted < (2 << 20)


def test_a_watchdog_trips_on_a_flood_of_entries(tmp_path):
    _flood(tmp_path, empties=30, big_bytes=4096)
    stopped = []
    saved = space.folder_bytes.__defaults__
    space.folder_bytes.__defaults__ = (20,)
    try:
        watch = space.Watchdog([tmp_path], uid=-1, limit_bytes=space.RUN_DISK_BYTES,
                               stop=lambda: stopped.append(True), every_s=0.01, shared=())
        for _ in range(200):
            if stopped:
                break
            watch._done.wait(0.01)
        watch.close()
    finally:
        space.folder_bytes.__defaults__ = saved
    assert watch.tripped and stopped == [True]
