#!/usr/bin/env bash
# Run the planner's tests against one torch version in a fresh venv of its own, so that a CPU
# build and PyPI's CUDA builds can each be checked (docs/PLANNER.md, "Other torch builds").
#   scripts/torch_matrix.sh 2.14.1            # PyPI's build of that version (a CUDA build, GBs)
#   scripts/torch_matrix.sh 2.13.0 /tmp/venv  # venv folder (default /tmp/gpumemlab-torch-VERSION)
# Exits with pytest's status; a torch that cannot be installed is a failure, not a skip.
set -euo pipefail
version="${1:?usage: scripts/torch_matrix.sh TORCH_VERSION [VENV_DIR]}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${2:-/tmp/gpumemlab-torch-$version}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "torch==$version"
"$venv/bin/pip" install -q -e "$root[test]"
build="$("$venv/bin/python" -c 'import torch; print(torch.__version__, "CUDA" if torch.backends.cuda.is_built() else "CPU-only")')"
echo "torch_matrix: $build in $venv"
cd "$root"
export MPLBACKEND=Agg GPUMEMLAB_HEADLESS=1
# the planner's tests plus fake capture, snapshot reading and lesson 16 (issue 33 item 1)
tests=(tests/planner)
for f in tests/recordings/test_fake_capture.py tests/recordings/test_capture.py tests/recordings/test_snapshot_io.py \
         tests/test_planner.py tests/test_planner_fake_cuda.py tests/test_cli_plan.py tests/test_fake_capture.py; do
    [ -e "$f" ] && tests+=("$f")
done
# lesson 16 (will it fit: gml.plan in a notebook kernel of this venv's python), top to bottom
tests+=("tests/notebooks/test_notebooks_widgets_on.py::test_lesson_runs_with_widgets_on[14]")
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"
