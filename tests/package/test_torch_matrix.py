"""scripts/torch_matrix.sh fails loudly, never skips: a torch that cannot be installed (after one
more try on a network error, none on any other error), a build of the wrong kind, a failed test and
a skip the matrix does not allow (scripts/torch_matrix_skips.py) each end it non-zero with a last
line naming the cause. Run against a venv folder whose pip and python are stand-ins (no download,
no torch): pip fails as told, python answers the torch import and writes pytest's JUnit report."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "torch_matrix.sh"

PIP = r"""#!/usr/bin/env bash
echo "$*" >> "$FAKE_DIR/pip.calls"
for a in "$@"; do
  case "$a" in torch|torch==*)
    n=$(( $(cat "$FAKE_DIR/torch.tries" 2>/dev/null || echo 0) + 1 )); echo $n > "$FAKE_DIR/torch.tries"
    case "$FAKE_PIP" in
      network-once) [ $n = 1 ] && { echo "ReadTimeoutError: HTTPSConnectionPool(host='pypi.org'): Read timed out." >&2; exit 1; } ;;
      network) echo "ERROR: Could not install packages due to an OSError: Max retries exceeded with url" >&2; exit 1 ;;
      resolve) echo "ERROR: ResolutionImpossible: torch==9.9 is not there" >&2; exit 1 ;;
    esac ;;
  esac
done
exit 0
"""

PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = -c ]; then echo "$FAKE_TORCH"; exit 0; fi
if [ "$1" = -m ]; then
  for a in "$@"; do case "$a" in --junitxml=*) printf '%s' "$FAKE_JUNIT" > "${a#--junitxml=}" ;; esac; done
  exit "$FAKE_PYTEST_RC"
fi
exec "$REAL_PYTHON" "$@"
"""

CLEAN = '<testsuites><testsuite><testcase classname="tests.a" name="test_x"/></testsuite></testsuites>'


def _junit(reason):
    return ('<testsuites><testsuite><testcase classname="tests.recordings.test_fake_capture" '
            f'name="test_y"><skipped type="pytest.skip" message="{reason}">x</skipped></testcase>'
            '</testsuite></testsuites>')


def _run(tmp_path, *args, pip="ok", torch="2.14.1+cu130 cuda", junit=CLEAN, rc=0):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    for name, text in (("pip", PIP), ("python", PYTHON)):
        (venv / "bin" / name).write_text(text)
        (venv / "bin" / name).chmod(0o755)
    env = dict(os.environ, FAKE_DIR=str(tmp_path), FAKE_PIP=pip, FAKE_TORCH=torch, FAKE_JUNIT=junit,
               FAKE_PYTEST_RC=str(rc), REAL_PYTHON=sys.executable)
    run = subprocess.run(["bash", str(SCRIPT), *args, "2.14.1", str(venv)], capture_output=True,
                         text=True, env=env, timeout=60)
    tries = int((tmp_path / "torch.tries").read_text()) if (tmp_path / "torch.tries").exists() else 0
    last = (run.stdout + run.stderr).strip().splitlines()[-1]
    return run, tries, last


def test_a_network_error_is_tried_once_more_and_then_passes(tmp_path):
    run, tries, last = _run(tmp_path, pip="network-once")
    assert run.returncode == 0, run.stderr
    assert tries == 2 and "trying once more" in run.stderr
    assert run.stdout.strip().splitlines()[-1].startswith("torch_matrix: PASSED: torch 2.14.1+cu130 cuda")


def test_a_network_error_twice_fails(tmp_path):
    run, tries, _ = _run(tmp_path, pip="network")
    assert run.returncode == 1 and tries == 2
    assert run.stderr.strip().splitlines()[-1].startswith("torch_matrix: FAILED (2.14.1")
    assert "could not install torch==2.14.1" in run.stderr


def test_any_other_install_error_fails_at_once(tmp_path):
    run, tries, last = _run(tmp_path, pip="resolve")
    assert run.returncode == 1 and tries == 1
    assert "ResolutionImpossible" in run.stderr and "could not install torch==2.14.1" in last


def test_a_cpu_build_fails_the_cuda_leg(tmp_path):
    run, _, last = _run(tmp_path, "--cuda", torch="2.13.0+cpu cpu")
    assert run.returncode == 1
    assert "asked for a cuda build of torch, pip installed 2.13.0+cpu (a cpu build)" in last


def test_a_failed_test_fails_the_leg(tmp_path):
    run, _, last = _run(tmp_path, rc=1)
    assert run.returncode == 1 and "pytest exited with status 1" in last


def test_only_the_allowed_skips_pass(tmp_path):
    cpu_only = _junit("CPU builds only: a CUDA build of torch makes fake CUDA tensors itself")
    run, _, _ = _run(tmp_path, "--cuda", junit=cpu_only)
    assert run.returncode == 0, run.stderr
    assert "torch_matrix: allowed skip: tests.recordings.test_fake_capture::test_y" in run.stdout
    run, _, last = _run(tmp_path, torch="2.13.0+cpu cpu", junit=cpu_only)   # not on a CPU build
    assert run.returncode == 1 and "a skip the matrix does not allow" in last
    built = _junit("this machine cannot build the fake-CUDA library: fake CUDA tensors need a C++ compiler")
    run, _, last = _run(tmp_path, junit=built)
    assert run.returncode == 1 and "NOT ALLOWED skip" in run.stdout


def _skips_module():
    spec = importlib.util.spec_from_file_location("torch_matrix_skips", ROOT / "scripts" / "torch_matrix_skips.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("reason, build, uid, ok", [
    ("CPU builds only: x", "cuda", 0, True),
    ("Skipped: CPU builds only: x", "cuda", 0, True),
    ("CPU builds only: x", "cpu", 0, False),
    ("needs root: x", "cpu", 1000, True),
    ("needs root: x", "cuda", 0, False),
    ("could not import 'torch': libcudart.so.13: cannot open shared object file", "cuda", 0, False),
    ("", "cuda", 1000, False),
])
def test_the_allowed_reasons(reason, build, uid, ok):
    assert _skips_module().allowed(reason, build, uid) is ok
