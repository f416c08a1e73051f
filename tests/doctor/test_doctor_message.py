"""The doctor's message mode on every form of OOM message PyTorch has printed.

The messages are built here from c10/cuda/CUDACachingAllocator.cpp's format strings over its
history (1.0-1.3 "cached", 1.4+ "reserved in total by PyTorch", the 1.10 hint, 2.1's "capacty"
spelling, 2.2+ process lines and the expandable_segments hint, the newest PYTORCH_ALLOC_CONF hint,
private pools, memory fractions, ROCm's "HIP"), with sizes printed by c10's format_size."""
import json
import subprocess
import sys

import pytest

import gpumemlab as gml
from gpumemlab.allocator.sizes import format_size as fs
from gpumemlab.doctor.message import NotAnOOMMessage, parse_message

GiB, MiB = 1 << 30, 1 << 20
HINT_1X = (" If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
           "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
HINT_21 = (" If reserved but unallocated memory is large try setting max_split_size_mb to avoid "
           "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
HINT_2X = (" If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
           "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/"
           "cuda.html#environment-variables)")


def msg_1x(req, dev, total, alloc, free, reserved, *, word="reserved in total by PyTorch",
           allowed=None, hint="", backend="CUDA"):
    allowed_info = "" if allowed is None else fs(allowed) + " allowed; "
    # 1.0-1.3 printed amount_cached - amount_allocated as "cached"
    last = reserved - alloc if word == "cached" else reserved
    return (f"{backend} out of memory. Tried to allocate {fs(req)} (GPU {dev}; {fs(total)} total "
            f"capacity; {fs(alloc)} already allocated; {fs(free)} free; {allowed_info}"
            f"{fs(last)} {word})" + hint)


def msg_2x(req, dev, total, free, alloc, reserved, *, procs=(), this=None, allowed=None,
           private=0, hint=HINT_2X, capacity="capacity", backend="CUDA"):
    proc_info = "".join(f"Process {pid} has {fs(n)} memory in use. " for pid, n in procs)
    if this is not None:
        proc_info += f"Including non-PyTorch memory, this process has {fs(this)} memory in use. "
    allowed_info = "" if allowed is None else fs(allowed) + " allowed; "
    pools = f"with {fs(private)} allocated in private pools (e.g., CUDA Graphs), " if private else ""
    return (f"{backend} out of memory. Tried to allocate {fs(req)}. GPU {dev} has a total "
            f"{capacity} of {fs(total)} of which {fs(free)} is free. {proc_info}{allowed_info}"
            f"Of the allocated memory {fs(alloc + private)} is allocated by PyTorch, {pools}and "
            f"{fs(reserved - alloc - private)} is reserved by PyTorch but unallocated." + hint)


def close(fig, value):
    """A parsed figure agrees with the true value to the printed precision, and no better."""
    assert fig is not None
    assert abs(fig.bytes - value) <= fig.precision_bytes + 1, (fig, value)


def traceback_of(message, exc="torch.OutOfMemoryError"):
    return ("Traceback (most recent call last):\n  File \"train.py\", line 41, in <module>\n"
            "    loss = model(x).sum()\n  File \"/usr/lib/python3/site-packages/torch/nn/modules/"
            "module.py\", line 1751, in _wrapped_call_impl\n    return self._call_impl(*args)\n"
            f"{exc}: {message}\n")


FORMS = {
    "1.0 cached": msg_1x(20 * MiB, 0, 11 * GiB + 170 * MiB, 10 * GiB + 700 * MiB, 9 * MiB,
                         10 * GiB + 820 * MiB, word="cached"),
    "1.4 reserved": msg_1x(376 * MiB, 0, 4045 * MiB, 1761 * MiB, 355 * MiB, 2519 * MiB),
    "1.10 hint": msg_1x(226 * MiB, 0, 2 * GiB, 839 * MiB, 122 * MiB, 944 * MiB, hint=HINT_1X),
    "1.x allowed": msg_1x(64 * MiB, 1, 16 * GiB, 5 * GiB, 9 * GiB, 6 * GiB - 32 * MiB,
                          allowed=6 * GiB),
    "2.1 capacty": msg_2x(2 * GiB, 0, 24 * GiB, 1 * GiB, 19 * GiB, 22 * GiB, capacity="capacty",
                          this=23 * GiB - 300 * MiB, hint=HINT_21),
    "2.x processes": msg_2x(1252 * MiB, 0, 15 * GiB + 790 * MiB, 959 * MiB, 14 * GiB + 10 * MiB,
                            14 * GiB + 480 * MiB, procs=[(12447, 2 * GiB)],
                            this=14 * GiB + 900 * MiB),
    "2.x no process lines": msg_2x(1 * GiB, 0, 80 * GiB, 700 * MiB, 60 * GiB, 79 * GiB),
    "2.x no hint": msg_2x(1 * GiB, 0, 80 * GiB, 700 * MiB, 60 * GiB, 79 * GiB, hint=""),
    "2.x private pools": msg_2x(512 * MiB, 0, 40 * GiB, 200 * MiB, 30 * GiB, 39 * GiB,
                                private=4 * GiB),
    "2.x allowed": msg_2x(1 * GiB, 0, 40 * GiB, 20 * GiB, 15 * GiB, 19 * GiB, allowed=20 * GiB),
    "newest PYTORCH_ALLOC_CONF": msg_2x(3 * GiB, 2, 80 * GiB, 1 * GiB, 70 * GiB, 78 * GiB,
                                        hint=HINT_2X.replace("PYTORCH_CUDA_ALLOC_CONF",
                                                             "PYTORCH_ALLOC_CONF")),
    "HIP 2.x": msg_2x(1 * GiB, 0, 64 * GiB, 500 * MiB, 50 * GiB, 63 * GiB, backend="HIP"),
    "HIP 1.x": msg_1x(20 * MiB, 0, 32 * GiB, 30 * GiB, 3 * MiB, 31 * GiB, backend="HIP"),
}


@pytest.mark.parametrize("name", sorted(FORMS))
@pytest.mark.parametrize("wrap", ["bare", "torch.OutOfMemoryError", "RuntimeError",
                                  "torch.cuda.OutOfMemoryError", "wrapped at 80 columns"])
def test_every_form_parses_to_its_printed_figures(name, wrap):
    text = FORMS[name]
    if wrap == "wrapped at 80 columns":
        text = "\n".join(text[i:i + 80] for i in range(0, len(text), 80))
    elif wrap != "bare":
        text = traceback_of(text, wrap)
    m = parse_message(text)
    assert m.missing == [] and m.form == ("1.0-1.3" if "cached" in name else "1.4-2.0"
                                          if "1." in name else "2.1+")
    assert m.backend == ("HIP" if "HIP" in name else "CUDA")
    if wrap not in ("bare", "wrapped at 80 columns"):
        assert m.exception == wrap
    d = gml.doctor(message=text)
    for key in ("requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
                "reserved_bytes", "reserved_unallocated_bytes", "device"):
        assert d.as_dict()[key] is not None, key
    # reserved = allocated + unallocated, and outside = total - free - reserved, in every form
    assert d.reserved_bytes == d.allocated_bytes + d.reserved_unallocated_bytes


def test_the_figures_are_the_ones_printed():
    m = parse_message(FORMS["2.x processes"])
    close(m.requested, 1252 * MiB)
    close(m.total, 15 * GiB + 790 * MiB)
    close(m.free, 959 * MiB)
    close(m.allocated, 14 * GiB + 10 * MiB)
    close(m.unallocated, 470 * MiB)
    close(m.this_process, 14 * GiB + 900 * MiB)
    assert list(m.other_processes) == [12447] and m.hint == "expandable_segments"
    assert m.requested.text == "1.22 GiB" and m.requested.precision_bytes == GiB // 200
    d = gml.doctor(message=FORMS["2.x processes"])
    # outside PyTorch has one meaning: total - free - reserved; this process's own part of it
    # (P - reserved: its context and libraries) is a separate detail
    reserved = m.allocated.bytes + m.unallocated.bytes
    assert d.non_pytorch_bytes == m.total.bytes - m.free.bytes - reserved
    assert d.details["this_process_outside_allocator_bytes"] == m.this_process.bytes - reserved
    assert d.other_processes_bytes == m.other_processes[12447].bytes
    m = parse_message(FORMS["1.0 cached"])
    close(m.unallocated, 120 * MiB)            # reserved minus allocated, as 1.0-1.3 printed it
    assert m.reserved is None
    d = gml.doctor(message=FORMS["1.0 cached"])
    assert abs(d.reserved_bytes - (10 * GiB + 820 * MiB)) <= d.precision["reserved_bytes"] + 1
    assert parse_message(FORMS["1.10 hint"]).hint == "max_split_size_mb"
    assert parse_message(FORMS["2.1 capacty"]).hint == "max_split_size_mb"
    assert parse_message(FORMS["newest PYTORCH_ALLOC_CONF"]).hint == "expandable_segments"
    assert parse_message(FORMS["2.x no hint"]).hint is None
    pools = parse_message(FORMS["2.x private pools"])
    close(pools.private_pools, 4 * GiB)
    close(pools.allocated, 34 * GiB)           # c10 prints allocated + private pools
    close(parse_message(FORMS["2.x allowed"]).allowed, 20 * GiB)
    close(parse_message(FORMS["1.x allowed"]).allowed, 6 * GiB)
    assert parse_message("CUDA out of memory. Tried to allocate 512 bytes (GPU 0; 1.00 GiB total "
                         "capacity; 1023.00 MiB already allocated; 0 bytes free; 1.00 GiB "
                         "reserved in total by PyTorch)").requested.bytes == 512


def test_kinds_follow_the_rules():
    # outside PyTorch (total - free - reserved) larger than reserved: another process holds it
    other = msg_2x(2 * GiB, 0, 24 * GiB, 1 * GiB, 5 * GiB, 6 * GiB, procs=[(999, 16 * GiB)],
                   this=6 * GiB + 400 * MiB)
    d = gml.doctor(message=other)
    assert d.kind == "outside_pytorch" and d.fixes[0].name == "other_processes"
    assert "999" in d.fixes[0].why
    # reserved but unallocated >= request: fragmentation, expandable segments first
    frag = msg_2x(2 * GiB, 0, 24 * GiB, 100 * MiB, 18 * GiB, 23 * GiB)
    d = gml.doctor(message=frag)
    assert d.kind == "fragmentation" and d.fixes[0].alloc_conf == "expandable_segments:True"
    assert any(f.name == "not_empty_cache" for f in d.fixes)
    # neither: exhaustion, with the shortfall named
    ex = msg_1x(4 * GiB, 0, 16 * GiB, 15 * GiB, 200 * MiB, 15 * GiB + 300 * MiB)
    d = gml.doctor(message=ex)
    assert d.kind == "exhaustion" and d.fixes[0].name == "reduce_peak_memory"
    assert fs(4 * GiB - 200 * MiB - 300 * MiB) in d.fixes[0].why
    # nothing is verified from a message, and the doctor says what it cannot tell
    assert not any(f.verified for f in d.fixes) and d.recommended is None
    assert any("settings were on" in c for c in d.cannot_tell)
    assert any("_record_memory_history" in c for c in d.cannot_tell)


def test_a_process_line_as_big_as_this_process_is_flagged_as_probably_itself():
    # inside a container NVML's pid is not getpid(): the process itself is listed as "Process N"
    text = msg_2x(1252 * MiB, 0, 15 * GiB + 790 * MiB, 959 * MiB, 14 * GiB + 10 * MiB,
                  14 * GiB + 480 * MiB, procs=[(12447, 14 * GiB + 850 * MiB)])
    d = gml.doctor(message=text)
    assert any("probably this very process" in e for e in d.evidence)


def test_partial_and_absurd_messages():
    d = gml.doctor(message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. "
                           "GPU 0 has a total capacity of 23.53 GiB of which 14.12 MiB is free.")
    assert d.requested_bytes is not None and d.total_bytes is not None
    assert d.allocated_bytes is None and d.reserved_bytes is None and d.kind == "unknown"
    assert d.as_dict()["kind"] == "unknown" and "?" not in str(d)
    assert any("partial message" in n and "allocated" in n for n in d.notes)
    exa = gml.doctor(message="RuntimeError: CUDA out of memory. Tried to allocate more than 1EB memory.")
    assert exa.requested_bytes == 1 << 60 and exa.details["form"] == "exa"


def test_the_simulators_own_oom_message_reads_back_exactly():
    gpu = gml.SimulatedGPU("2GiB", alloc_conf="")
    keep = [gpu.empty(300 * MiB) for _ in range(5)]
    with pytest.raises(gml.OutOfMemoryError) as info:
        gpu.empty(900 * MiB)
    d = gml.doctor(info.value)              # an exception goes to message mode
    stats = gpu.memory_stats()
    assert d.mode == "message" and d.source == "OutOfMemoryError"
    m = parse_message(str(info.value))
    close(m.allocated, stats["allocated_bytes.all.current"])
    close(m.unallocated, stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"])
    close(m.total, 2 * GiB)
    assert d.kind == "exhaustion"
    del keep


def test_not_a_message_is_refused_clearly():
    with pytest.raises(NotAnOOMMessage, match="not an out-of-memory message"):
        gml.doctor(message="Segmentation fault (core dumped)")
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", "--message",
                          "RuntimeError: expected scalar type Float"], capture_output=True, text=True)
    assert run.returncode == 2 and "not an out-of-memory message" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert "Tried to allocate" in run.stderr          # says what it looked for
    assert run.stdout == ""


def test_cli_message_from_stdin_and_file(tmp_path):
    text = traceback_of(FORMS["2.x processes"])
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", "-", "--json"],
                         input=text, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    for key in ("kind", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
                "reserved_bytes", "reserved_unallocated_bytes", "non_pytorch_bytes", "device",
                "fixes"):
        assert key in out
    assert {"name", "why", "alloc_conf", "fits", "peak_reserved_bytes"} <= set(out["fixes"][0])
    f = tmp_path / "oom.txt"
    f.write_text(text)
    page = tmp_path / "r.html"
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", "--message-file", str(f),
                          "--html", str(page)], capture_output=True, text=True)
    assert run.returncode == 0 and "kind: memory held outside PyTorch" in run.stdout
    assert "https://" not in page.read_text()


def test_rounding_never_makes_memory_outside_pytorch_negative():
    # reserved printed rounded up, total and free rounded down: the difference dips below 0
    text = ("CUDA out of memory. Tried to allocate 2.76 GiB. GPU 0 has a total capacity of "
            "24.00 GiB of which 2.58 GiB is free. Of the allocated memory 21.42 GiB is allocated "
            "by PyTorch, and 5.14 MiB is reserved by PyTorch but unallocated.")
    d = gml.doctor(message=text)
    assert d.non_pytorch_bytes == 0 and not any("do not add up" in n for n in d.notes)
