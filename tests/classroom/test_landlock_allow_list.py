"""The unprivileged mode's allow-list (Landlock): a run as a uid of its own reads the kit, the
packages and the system, writes its own folders and the temporary ones, and reads nothing else
of the machine; a second checkout's answers (a world-readable folder) are out of its reach.
A fresh hostile student scored 5/5 by copying them before this bound."""
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from gpumemlab.classroom.isolation import landlock, unprivileged
from nobody_python import python_for_nobody, skip_or_fail, unprivileged_mode  # noqa: F401

# skipped only where the grader is not root; as root, anything missing fails
pytestmark = pytest.mark.usefixtures("unprivileged_mode")

READ_OTHER = """
import sys
try:
    open(sys.argv[1]).read()
    print("read")
except OSError as e:
    print("refused", e.errno)
"""


@pytest.fixture
def other_checkout():
    """A world-readable answers file outside /tmp, as a second checkout on the machine is."""
    base = Path(tempfile.mkdtemp(prefix="gml-other-checkout-", dir="/var/tmp/.."))
    try:
        os.chmod(base, 0o755)
        answers = base / "answers.py"
        answers.write_text("RIGHT = 42\n")
        os.chmod(answers, 0o644)
        yield answers
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run(argv, cwd):
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, timeout=120,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": cwd})


def test_a_run_cannot_read_a_second_checkout(other_checkout):
    if landlock.abi() < 1:
        skip_or_fail("this kernel has no Landlock")
    # pytest's own tmp_path sits in a 0700 folder no other uid can enter
    tmp_path = Path(tempfile.mkdtemp(prefix="gml-landlock-test-"))
    try:
        os.chmod(tmp_path, 0o755)
        _check(other_checkout, tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _check(other_checkout, tmp_path):
    python = python_for_nobody(tmp_path / "python")
    if python is None:
        skip_or_fail("no interpreter here that an unprivileged user can start")
    kit, own = tmp_path / "kit", tmp_path / "own"
    for d in (kit, own):
        d.mkdir()
        os.chmod(d, 0o777)
    inner = [python, "-S", "-c", READ_OTHER, str(other_checkout)]
    uid = unprivileged.pick_uid()
    try:
        plain = _run(unprivileged.command(inner, uid), str(own))
        bounded = _run(unprivileged.command(inner, uid, kit=kit, writable=[own]), str(own))
    finally:
        unprivileged.kill_leftovers(0, uid)
        unprivileged.release_uid(uid)
    assert plain.stdout.strip() == "read", plain          # the bound is what stops it ...
    assert bounded.stdout.strip() == "refused 13", bounded  # ... EACCES under the allow-list
