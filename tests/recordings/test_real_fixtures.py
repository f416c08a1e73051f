"""Real-GPU recordings (cuda_<scenario>.pickle in tests/fixtures/snapshots/, made on a CUDA card
by tests/gpu/record_fixtures.py) replay on the model with 0 address mismatches. Skipped while
none are committed; the recording script itself is checked here with a dry run on the model."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "snapshots"
from record_fixtures import MANIFEST, replay_fixture  # noqa: E402


def _recorded():
    path = FIXTURES / MANIFEST
    if not path.exists():
        return []
    manifest = json.loads(path.read_text())
    return [(name, FIXTURES / m["file"], manifest["budget"])
            for name, m in sorted(manifest["scenarios"].items())]


@pytest.mark.skipif(not _recorded(), reason="no real-GPU recordings committed yet "
                    "(run tests/gpu/record_fixtures.py on a CUDA machine)")
@pytest.mark.parametrize("name, path, budget", _recorded() or [("none", None, 0)])
def test_real_recording_replays_with_no_address_mismatch(name, path, budget):
    result = replay_fixture(path, budget)
    assert result.address_mismatches == 0 and result.reproduced, (name, result.start_problems)


def test_the_recording_script_on_the_model(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu" / "record_fixtures.py"),
                           "--on-model", "--out", str(tmp_path), "--only", "fragmentation_oom",
                           "expandable_segments", "kv_contiguous"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert sorted(manifest["scenarios"]) == ["expandable_segments", "fragmentation_oom",
                                             "kv_contiguous"]
    assert "0 address mismatches" in done.stdout and "3 of 3 recorded" in done.stdout
    for m in manifest["scenarios"].values():
        path = tmp_path / m["file"]
        assert path.stat().st_size < 200_000
        assert replay_fixture(path, manifest["budget"]).address_mismatches == 0
