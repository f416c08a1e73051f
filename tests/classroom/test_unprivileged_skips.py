"""The unprivileged mode's hostile tests are never passed by skipping where the grader is root
(``fixtures/classroom/nobody_python.skip_or_fail``): CI runs as root, and a missing setpriv, an
interpreter no other user can start or a kernel without Landlock must turn it red."""
import pytest

import nobody_python


def test_as_root_a_missing_piece_fails(monkeypatch):
    monkeypatch.setattr(nobody_python.os, "geteuid", lambda: 0)
    with pytest.raises(pytest.fail.Exception, match="setpriv is not installed: as root"):
        nobody_python.skip_or_fail("setpriv is not installed")


def test_not_root_it_is_skipped(monkeypatch):
    monkeypatch.setattr(nobody_python.os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.skip.Exception, match="no Landlock"):
        nobody_python.skip_or_fail("no Landlock")
