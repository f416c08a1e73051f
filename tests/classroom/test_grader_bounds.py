"""The grader's bounds outside the sandbox: judges in limited children, notebooks read with
the JSON parser under caps, feedback cleaned and scrubbed, each student's files on their own,
and the sandbox's memory filter (bounds in time and memory: benchmarks/bench_hostile_inputs.py)."""
import json
import os
import struct
import sys

import pytest

from gpumemlab.classroom import isolation
from gpumemlab.classroom.isolation import confine
from gpumemlab.classroom.grade import StudentResult
from gpumemlab.classroom.judge_pool import ANSWER_LIMIT, JudgePool
from gpumemlab.classroom.reports import FEEDBACK_LIMIT, write_feedback
from gpumemlab.classroom.scrub import grader_paths, scrub
from gpumemlab.classroom.submission import (CELL_LIMIT, CONTAINER_LIMIT, SubmissionError,
                                            parse_submission, read_submission)

ATTACK_10 = "out" + ".clone()" * 200_000 + ".argmax(1).tolist()"
EXERCISE = {"question": "10.ex", "name": "keep", "probes": None, "kind": "exercise",
            "call_if_callable": True}


@pytest.fixture(scope="module")
def pool():
    p = JudgePool()
    yield p
    p.close()


def test_judging_in_a_child_gives_the_same_verdicts(pool):
    assert pool.judge(EXERCISE, {"ok": True, "value": "out.argmax(1).tolist()"}, "s") == (True, "")
    ok, message = pool.judge(EXERCISE, {"ok": True, "value": "out.detach()"}, "s")
    assert not ok and "not each sample's predicted class" in message


def test_the_10ex_attack_is_refused_before_any_judge_runs(pool):
    assert len(json.dumps(ATTACK_10)) > ANSWER_LIMIT
    ok, message = pool.judge(EXERCISE, {"ok": True, "value": ATTACK_10}, "s")
    assert not ok and "larger than" in message and "\n" not in message


@pytest.mark.parametrize("limits, says", [({"wall_s": 0.05}, "took more than 0.05 s"),
                                          ({"memory_bytes": 1 << 20}, "")])
def test_an_answer_past_its_limits_fails_that_test_in_one_line(limits, says):
    tight = JudgePool(limits)
    try:
        ok, message = tight.judge(EXERCISE, {"ok": True, "value": "out.argmax(1).tolist()"}, "s")
        assert not ok and says in message and message.startswith("10.ex")
        assert tight.judge(EXERCISE, {"ok": True, "value": "out"}, "s")[0] is False
    finally:
        tight.close()


def test_a_judged_message_with_a_lone_surrogate_comes_back_escaped(pool):
    request = {"question": "01.5", "name": "round_size", "probes": [[1]],
               "signature": "round_size(size)"}
    ok, message = pool.judge(request, {"ok": True, "calls": [{"error": "ValueError: \ud800"}]},
                             "s")
    assert not ok and "\\ud800" in message
    message.encode("utf-8")


def notebook(cells):
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                       "nbformat_minor": 5}).encode()


def test_a_cell_with_60000_unknown_outputs_is_read_as_its_source_only():
    outputs = [{"output_type": "weird", "n": i} for i in range(60_000)]
    cell = {"cell_type": "code", "source": ["x = ", "1"], "outputs": outputs, "metadata": {
        "nbgrader": {"grade_id": "a", "solution": True}}, "execution_count": None}
    nb = parse_submission(notebook([cell, {"cell_type": "unknown"}]))
    assert [(c.cell_type, c.source, c.metadata) for c in nb.cells] == \
        [("code", "x = 1", {"nbgrader": {"grade_id": "a"}})]
    assert nb.cells[0].outputs == []


@pytest.mark.parametrize("data, match", [
    (b"[" * 200_000, "nested too deeply"),
    (b"[]," * (CONTAINER_LIMIT + 1), "JSON lists and objects"),
    (notebook([{"cell_type": "code", "source": ""}] * (CELL_LIMIT + 1)), "cells"),
    (notebook([{"cell_type": "code", "source": 3}]), "not text"),
    (b"{not json", "not JSON"),
    (b"[" + b"1" * 5000 + b"]", "not JSON"),
])
def test_hostile_notebooks_are_refused_in_one_line(data, match):
    with pytest.raises(SubmissionError, match=match) as info:
        parse_submission(data)
    assert "\n" not in str(info.value)


def test_only_regular_files_are_read(tmp_path):
    os.mkfifo(tmp_path / "fifo.ipynb")   # would block a plain open
    with pytest.raises(SubmissionError, match="not a regular file"):
        read_submission(tmp_path / "fifo.ipynb")
    (tmp_path / "link.ipynb").symlink_to(tmp_path / "fifo.ipynb")
    with pytest.raises(SubmissionError, match="cannot be opened"):
        read_submission(tmp_path / "link.ipynb")


def test_feedback_is_scrubbed_of_every_grader_path(tmp_path):
    kit, teacher = tmp_path / "gml-kit-abc", tmp_path / "my course"
    paths = grader_paths(kit, [str(teacher)])
    venv = isolation.python_roots()[0]
    text = (f"{kit}/gpumemlab/x.py {teacher}/lab.ipynb {sys.prefix}/lib/site.py "
            f"/gml-kit-abc /newroot {str(teacher).replace(' ', chr(92) + '040')} \x1b[2J")
    out = scrub(text, paths)
    for leaked in (str(kit), str(teacher), venv, "gml-kit", "\x1b", "\\040"):
        assert leaked not in out, leaked
    assert "<kit>/gpumemlab/x.py" in out and "<teacher>/lab.ipynb" in out


def result(sid, output):
    tests = [{"name": "t", "score": 0.0, "max_score": 1.0, "status": "failed",
              "output": output, "inside_only": False}]
    return StudentResult(sid, tests, 0.0, 1.0, 1.0, notes=[output])


def test_one_students_feedback_never_stops_the_others(tmp_path):
    results = [result("a", "raised ValueError: \ud800 \x1b[1A\x1b[2K[PASS] t"),
               result("b", "x" * (4 * FEEDBACK_LIMIT)), result("c", "fine")]
    assert write_feedback(results, tmp_path, assignment="lab") == []
    for sid in "abc":
        text = (tmp_path / sid / "feedback.txt").read_text(encoding="utf-8")
        assert "\x1b" not in text and len(text) < FEEDBACK_LIMIT + 100
        json.loads((tmp_path / sid / "results.json").read_text(encoding="utf-8"))
    assert "\\ud800" in (tmp_path / "a" / "feedback.txt").read_text(encoding="utf-8")
    (tmp_path / "d").write_text("in the way")   # a file where d's folder goes: d fails
    failed = write_feedback([result("d", "x"), result("e", "y")], tmp_path, assignment="lab")
    assert [sid for sid, _ in failed] == ["d"] and "\n" not in failed[0][1]
    assert (tmp_path / "e" / "feedback.txt").is_file()


def run_bpf(program: bytes, arch: int, nr: int) -> int:
    """A classic-BPF interpreter for the instructions the filter uses: the verdict."""
    insns = [struct.unpack("HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    data, acc, pc = {0: nr, 4: arch}, 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc, pc = data[k], pc + 1
        elif code == 0x15:
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x06:
            return k


def test_the_seccomp_filter_denies_memfd_and_shmget_only():
    prog = confine.seccomp_program()
    for arch, numbers in confine.DENIED.items():
        for nr in numbers:
            assert run_bpf(prog, arch, nr) == 0x00050001   # EPERM
        for nr in (0, 1, 9, 59, 60):   # read, write, mmap, execve, exit (x86_64 numbers)
            if nr not in numbers:
                assert run_bpf(prog, arch, nr) == 0x7FFF0000
    assert run_bpf(prog, 0x12345, 319) == 0x80000000   # SECCOMP_RET_KILL_PROCESS
    assert run_bpf(prog, 0x40000028, 385) == 0x80000000   # 32-bit ARM's memfd_create: killed


@pytest.mark.parametrize("machine", ["riscv64", "ppc64le", "s390x", ""])
def test_the_seccomp_filter_refuses_a_machine_it_does_not_know(machine):
    with pytest.raises(confine.UnknownArchitecture) as caught:
        confine.seccomp_program(machine=machine)
    line = str(caught.value)
    assert "\n" not in line and f"({machine})" in line and "x86_64, i386 and aarch64" in line


def test_on_a_machine_the_filter_does_not_know_no_sandbox_is_one_line(monkeypatch):
    """The grader's sandbox check says why in one line (then refuses to grade hostile code
    without --no-sandbox), instead of stopping on a traceback."""
    from collections import namedtuple

    from gpumemlab.classroom import isolation

    uname = namedtuple("uname", "sysname nodename release version machine")
    monkeypatch.setattr(confine.os, "uname", lambda: uname("Linux", "x", "6", "1", "riscv64"))
    isolation.unavailable_reason.cache_clear()
    try:
        reason = isolation.unavailable_reason()
    finally:
        isolation.unavailable_reason.cache_clear()
    assert reason is not None and "\n" not in reason and "(riscv64)" in reason


@pytest.mark.parametrize("machine", ["x86_64", "i686", "aarch64"])
def test_the_seccomp_filter_is_built_on_each_machine_it_knows(machine):
    prog = confine.seccomp_program(machine=machine)
    assert run_bpf(prog, 0xC00000B7, 279) == 0x00050001   # aarch64's memfd_create: EPERM


def test_tmpfs_mounts_are_sized_from_the_memory_limit():
    assert confine.tmpfs_bytes(1 << 30) == 64 << 20
    assert confine.tmpfs_bytes(8 << 30) == 256 << 20
    assert confine.tmpfs_bytes(64 << 20) == 16 << 20


def test_no_cgroup_v2_is_used_where_the_machine_has_none(tmp_path):
    assert confine.delegated_parent(tmp_path) is None
    assert confine.plan(tmp_path) == "seccomp"


def test_a_delegated_cgroup_v2_gets_a_child_per_sandbox(tmp_path):
    """On a stand-in cgroup2 tree (plain files): the limits are written, the sandbox's shell
    joins the cgroup before it becomes the command, and the folder goes at the end."""
    import subprocess
    from pathlib import Path

    own = next((line[3:] for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")), None)
    if own is None:
        pytest.skip("this process has no cgroup v2 line")
    parent = tmp_path / own.lstrip("/")
    parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (parent / "cgroup.subtree_control").write_text("memory pids\n")
    assert confine.delegated_parent(tmp_path) == parent and confine.plan(tmp_path) == "cgroup v2"
    group = confine.CgroupV2(parent, 1 << 30, 256)
    assert (group.path / "memory.max").read_text() == str(1 << 30)
    assert (group.path / "pids.max").read_text() == "256"
    out = subprocess.run(group.wrap(["sh", "-c", "echo $$"]), capture_output=True, text=True)
    assert out.stdout.strip() == (group.path / "cgroup.procs").read_text().strip()
    for f in group.path.iterdir():   # a real cgroup's files vanish with it
        f.unlink()
    group.close()
    assert not group.path.exists()
