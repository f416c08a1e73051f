#!/usr/bin/env bash
# Run the planner's tests against one torch version in a fresh venv of its own, so that a CPU
# build and PyPI's CUDA builds can each be checked (docs/PLANNER.md, "Other torch builds").
#   scripts/torch_matrix.sh 2.14.1             # PyPI's build of that version (a CUDA build, GBs)
#   scripts/torch_matrix.sh --cuda newest      # the newest torch this machine's pip allows, which
#                                              # must be a CUDA build (.ci/run's CUDA-build leg)
#   scripts/torch_matrix.sh --cpu 2.13.0+cpu   # a CPU build, or fail
#   scripts/torch_matrix.sh 2.13.0 DIR         # venv folder (default .venv-torch/VERSION, git-ignored)
# Exits non-zero on a failed test, on a skip the matrix does not allow (scripts/torch_matrix_skips.py),
# and on a torch or kit that cannot be installed (pip is tried once more after a network error):
# a build failure is a failure, never a skip. The last line says which.
set -euo pipefail
want=any
case "${1:-}" in --cuda) want=cuda; shift ;; --cpu) want=cpu; shift ;; esac
version="${1:?usage: scripts/torch_matrix.sh [--cuda|--cpu] TORCH_VERSION|newest [VENV_DIR]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${2:-$root/.venv-torch/$version}"
python="${PYTHON:-python3}"
fail() { echo "torch_matrix: FAILED ($version, $venv): $*" >&2; exit 1; }
# what pip prints when the index could not be read or a download broke off
network='ConnectionError|ConnectTimeout|ReadTimeout|timed out|Connection (reset|refused|aborted)|Max retries exceeded|Temporary failure in name resolution|Name or service not known|Network is unreachable|IncompleteRead|ProtocolError|SSLError|Could not fetch URL|do not match the hashes'
pip_install() {
    local log="$venv/torch-matrix-pip.log" try
    for try in 1 2; do
        if "$venv/bin/pip" install -q "$@" >"$log" 2>&1; then
            return 0
        fi
        if [ "$try" = 1 ] && grep -Eq "$network" "$log"; then
            echo "torch_matrix: a network error installing $*; trying once more" >&2
            grep -Eo "$network" "$log" | head -n 1 >&2
            continue
        fi
        break
    done
    grep -v "^WARNING: Location" "$log" | tail -n 20 >&2
    fail "could not install $*"
}
start=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" || fail "could not make a venv with $python"
fi
pip_install --upgrade pip
if [ "$version" = newest ]; then
    pip_install --upgrade torch
else
    pip_install "torch==$version"
fi
pip_install -e "$root[test]"
build="$("$venv/bin/python" -c 'import torch; print(torch.__version__, "cuda" if torch.backends.cuda.is_built() else "cpu")')" \
    || fail "the installed torch does not import"
kind="${build##* }"
echo "torch_matrix: torch $build build in $venv (installed in $((SECONDS - start)) s)"
if [ "$want" != any ] && [ "$kind" != "$want" ]; then
    fail "asked for a $want build of torch, pip installed ${build% *} (a $kind build)"
fi
cd "$root"
export MPLBACKEND=Agg GPUMEMLAB_HEADLESS=1
# the planner's tests plus fake capture, snapshot reading and lesson 16 (issue 33 item 1)
tests=(tests/planner tests/recordings/test_fake_capture.py tests/recordings/test_capture.py
       tests/recordings/test_snapshot_io.py)
# lesson 16 (will it fit: gml.plan in a notebook kernel of this venv's python), top to bottom
tests+=("tests/notebooks/test_notebooks_widgets_on.py::test_lesson_runs_with_widgets_on[16]")
report="$venv/torch-matrix-junit.xml"
rm -f "$report"
status=0
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider --junitxml="$report" "${tests[@]}" || status=$?
[ -s "$report" ] || fail "pytest wrote no report (exit status $status)"
"$venv/bin/python" scripts/torch_matrix_skips.py "$report" "$kind" || fail "a skip the matrix does not allow (above)"
[ "$status" = 0 ] || fail "pytest exited with status $status (torch ${build% *})"
echo "torch_matrix: PASSED: torch $build build, in $((SECONDS - start)) s"
