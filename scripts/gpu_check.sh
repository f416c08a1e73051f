#!/usr/bin/env bash
# The real-GPU checks in one go, for a machine whose python3 has torch with CUDA (no Jupyter
# needed: the kit is pure Python, PYTHONPATH=. serves):
#
#   scripts/gpu_check.sh OUTDIR          (or set $OUT)
#
# 1. gpumemlab selftest --device cuda --json   -> OUTDIR/selftest.json
# 2. pytest tests/gpu (if pytest is installed)  -> OUTDIR/pytest_gpu.txt
# 3. tests/gpu/record_fixtures.py               -> OUTDIR/fixtures/ (cuda_*.pickle + manifest;
#    copy them into tests/fixtures/snapshots/ to commit them)
# 4. benchmarks/bench_cuda_costs.py             -> OUTDIR/cuda_costs.json (cudaMalloc/cudaFree by
#    size, cudaFree's synchronisation, empty_cache, expandable-segment page mapping)
# OUTDIR/summary.txt says what ran, its exit status and seconds. Each step has a time limit,
# together under 8 minutes. Exit 0 when all four passed, 2 without CUDA (the simulator half
# still runs and is written down), 1 otherwise.
set -u
out="${1:-${OUT:-}}"
if [ -z "$out" ]; then
    echo "usage: scripts/gpu_check.sh OUTDIR (or set OUT)" >&2
    exit 2
fi
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.." || exit 2
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
py="${PYTHON:-python3}"
summary="$out/summary.txt"
: > "$summary"
failed=0

note() { echo "$*" | tee -a "$summary"; }

# step NAME LIMIT_S STDOUT_FILE COMMAND...: run it under a time limit, note status and seconds
step() {
    local name="$1" limit="$2" log="$3"
    shift 3
    local start=$SECONDS
    timeout "$limit" "$@" > "$log" 2> "$log.stderr"
    local rc=$?
    [ "$rc" -eq 124 ] && echo "(stopped after ${limit} s)" >> "$log.stderr"
    note "$name: exit $rc in $((SECONDS - start)) s (log: $(basename "$log"))"
    return "$rc"
}

{
    echo "date: $(date -u +%FT%TZ)"
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    "$py" -c 'import sys, platform; print("python", platform.python_version(), sys.executable)'
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available()); [print("device", i, torch.cuda.get_device_name(i), torch.cuda.mem_get_info(i)) for i in range(torch.cuda.device_count())]' 2>&1
    command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv
} > "$out/environment.txt" 2>&1

if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
    note "no CUDA here ($py: torch missing or torch.cuda.is_available() is False): GPU checks not run"
    step "selftest --device sim --json" 120 "$out/selftest_sim.json" \
        "$py" -m gpumemlab.cli selftest --device sim --json
    step "selftest --device cuda (expect exit 2)" 60 "$out/selftest_cuda_refused.txt" \
        "$py" -m gpumemlab.cli selftest --device cuda --json
    note "result: no CUDA (exit 2)"
    exit 2
fi

step "selftest --device cuda --json" 120 "$out/selftest.json" \
    "$py" -m gpumemlab.cli selftest --device cuda --json || failed=1

if "$py" -c 'import pytest' 2> /dev/null; then
    # the full selftest comparison just ran as step 1: not again inside pytest
    step "pytest tests/gpu" 130 "$out/pytest_gpu.txt" \
        "$py" -m pytest -q -p no:cacheprovider -rs tests/gpu \
        --deselect tests/gpu/test_selftest_cuda.py::test_every_scenario_compares_equal_on_the_card \
        || failed=1
else
    note "pytest tests/gpu: not run (pytest is not installed for $py)"
    failed=1
fi

step "record_fixtures.py" 90 "$out/record_fixtures.txt" \
    "$py" tests/gpu/record_fixtures.py --out "$out/fixtures" || failed=1

step "bench_cuda_costs.py" 90 "$out/cuda_costs.txt" \
    "$py" benchmarks/bench_cuda_costs.py --json "$out/cuda_costs.json" || failed=1

note "total: $SECONDS s"
note "result: $([ "$failed" -eq 0 ] && echo 'all passed' || echo 'something failed (see the logs)')"
exit "$failed"
