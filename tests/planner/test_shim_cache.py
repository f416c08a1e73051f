"""The fake-CUDA library is loaded only from a private folder of the user's, and only when it is the
library built there: each attack another user could make on the cache gets a fresh build instead."""
import hashlib
import os
import tempfile

import pytest

from gpumemlab.recordings import fake_cuda, fake_cuda_cache as cache

PLANTED = b"\x7fELF not the library this user built"


def _layout(tmp_path, monkeypatch):
    base = tmp_path / "cache"
    base.mkdir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    monkeypatch.setattr(fake_cuda, "cuda_build", lambda: False)   # the CPU build's path, anywhere
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))   # fresh folders land here
    return str(base), fake_cuda._cache_dir()


def _plant(folder, digest=True):
    os.makedirs(folder, exist_ok=True)
    lib = os.path.join(folder, cache.LIBRARY)
    with open(lib, "wb") as f:
        f.write(PLANTED)
    if digest:   # a careful attacker writes the matching digest too
        with open(os.path.join(folder, cache.DIGEST), "w") as f:
            f.write(hashlib.sha256(PLANTED).hexdigest())
    return lib


def _never_loads(monkeypatch, planted):
    """build() with no compiler: it may return only a verified library, never the planted one."""
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: None)
    try:
        path = fake_cuda.build()
    except fake_cuda.FakeCudaUnavailable:
        return
    assert os.path.realpath(path) != os.path.realpath(planted)


def test_a_private_folder_with_its_recorded_digest_is_used(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    assert cache.private_folder(folder, base) == folder
    assert os.stat(folder).st_mode & 0o777 == 0o700
    lib = _plant(folder, digest=False)
    assert cache.verified_library(folder) is None            # no digest: not trusted
    assert cache.record_digest(folder) == lib
    assert cache.verified_library(folder) == lib
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: None)
    assert fake_cuda.build() == lib                          # no compiler needed: it is cached


@pytest.mark.skipif(os.getuid() != 0, reason="needs root: making a folder another user owns")
def test_a_folder_owned_by_another_user_is_not_used(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    planted = _plant(folder)
    os.chmod(folder, 0o700)
    for path in (folder, planted, os.path.join(folder, cache.DIGEST)):
        os.chown(path, 65534, 65534)
    got = cache.private_folder(folder, base)
    assert got != folder and not got.startswith(base)
    assert "owned by uid 65534" in cache.last_reason()
    assert os.stat(got).st_mode & 0o777 == 0o700 and os.listdir(got) == []
    _never_loads(monkeypatch, planted)


def test_a_world_writable_folder_is_not_used(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    planted = _plant(folder)
    os.chmod(folder, 0o777)
    got = cache.private_folder(folder, base)
    assert got != folder and "0777" in cache.last_reason()
    assert os.stat(folder).st_mode & 0o777 == 0o777          # not "tightened": anyone wrote there
    _never_loads(monkeypatch, planted)


def test_a_world_writable_folder_above_is_not_used(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    planted = _plant(folder)
    os.chmod(os.path.join(base, "gpumemlab"), 0o777)
    assert cache.problem(folder, base) is not None
    assert cache.private_folder(folder, base) != folder
    _never_loads(monkeypatch, planted)


def test_a_symlinked_cache_folder_is_not_followed(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    elsewhere = tmp_path / "attacker"
    planted = _plant(str(elsewhere))
    os.chmod(elsewhere, 0o700)
    os.makedirs(os.path.dirname(folder), mode=0o700)
    os.chmod(os.path.join(base, "gpumemlab"), 0o700)
    os.symlink(elsewhere, folder)
    assert "symlink" in cache.problem(folder, base)
    assert cache.private_folder(folder, base) != folder
    _never_loads(monkeypatch, planted)


def test_a_planted_library_in_the_users_folder_is_removed_not_loaded(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    assert cache.private_folder(folder, base) == folder
    planted = _plant(folder)          # its digest is right for it, but...
    with open(os.path.join(folder, cache.DIGEST), "w") as f:
        f.write(hashlib.sha256(b"what this user built").hexdigest())
    assert cache.verified_library(folder) is None
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: "c++")
    monkeypatch.setattr(fake_cuda.subprocess, "run", _no_compile)
    with pytest.raises(fake_cuda.FakeCudaUnavailable):
        fake_cuda.build()
    assert not os.path.exists(planted)   # removed before the build, so ninja cannot keep it


def test_a_library_others_can_write_is_not_trusted(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    cache.private_folder(folder, base)
    lib = _plant(folder, digest=False)
    cache.record_digest(folder)
    os.chmod(lib, 0o777)
    assert cache.verified_library(folder) is None


def test_an_earlier_versions_0755_folder_is_closed_to_0700(tmp_path, monkeypatch):
    base, folder = _layout(tmp_path, monkeypatch)
    os.makedirs(folder, mode=0o755)
    for p in (os.path.join(base, "gpumemlab"), os.path.dirname(folder), folder):
        os.chmod(p, 0o755)
    assert cache.private_folder(folder, base) == folder
    assert os.stat(folder).st_mode & 0o777 == 0o700


class _Failed:
    returncode, stdout, stderr = 1, "", "compiler stopped"


def _no_compile(*args, **kwargs):
    return _Failed()


def test_a_failed_build_fails_the_test_and_a_missing_compiler_skips_it(tmp_path, monkeypatch):
    """The planner tests' library fixture (fake_cuda_library): a compiler that stops is a failure
    (issue 33: a build failure is never a skip); no compiler at all is a skip saying what to install."""
    from fake_cuda_library import library_or_skip
    _layout(tmp_path, monkeypatch)
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: "c++")
    monkeypatch.setattr(fake_cuda.subprocess, "run", _no_compile)
    outcomes = (pytest.fail.Exception, pytest.skip.Exception)   # a skip must not end this test
    with pytest.raises(outcomes) as failed:
        library_or_skip()
    assert failed.type is pytest.fail.Exception and "compiler stopped" in str(failed.value)
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: None)
    with pytest.raises(outcomes) as skipped:
        library_or_skip()
    assert skipped.type is pytest.skip.Exception and "need a C++ compiler: install one" in str(skipped.value)
