"""The doctor's message mode on what people paste: every platform's own format, markup and logs
around it, figures that cannot be true, and the kinds and fixes that fit each platform.

Messages are built from the format strings of PyTorch's allocators (c10 CUDACachingAllocator.cpp
across versions, c10/xpu/XPUCachingAllocator.cpp, Intel's extension, CUDAMallocAsyncAllocator.cpp,
aten/src/ATen/mps/MPSAllocator.mm, hipified ROCm builds) with sizes printed by c10's format_size.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gpumemlab as gml
from gpumemlab.allocator.sizes import format_size as fs
from gpumemlab.doctor.message import NotAnOOMMessage, parse_message

from .test_doctor_message import HINT_2X, msg_1x, msg_2x

GiB, MiB = 1 << 30, 1 << 20
DOCS = Path(__file__).resolve().parents[2] / "docs" / "DOCTOR.md"


def xpu(req, total, free, alloc, reserved, dev=0):
    free_info = "" if free is None else f" of which {fs(free)} is free"
    return (f"torch.OutOfMemoryError: XPU out of memory. Tried to allocate {fs(req)}. GPU {dev} has "
            f"a total capacity of {fs(total)}{free_info}. Of the allocated memory {fs(alloc)} is "
            f"allocated by PyTorch, and {fs(reserved - alloc)} is reserved by PyTorch but "
            f"unallocated. Please use `empty_cache` to release all unoccupied cached memory.")


def mps(alloc, other, limit, req, pool="private"):
    cap = "" if limit is None else f", max allowed: {fs(limit)}"
    tail = (" Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory "
            "allocations (may cause system failure).") if limit is not None else ""
    return (f"RuntimeError: MPS backend out of memory (MPS allocated: {fs(alloc)}, other "
            f"allocations: {fs(other)}{cap}). Tried to allocate {fs(req)} on {pool} pool.{tail}")


def async_msg(alloc, req, total, free, limit=(1 << 64) - 1, dev=0):
    return (f"torch.OutOfMemoryError: Allocation on device {dev} would exceed allowed memory. "
            f"(out of memory)\nCurrently allocated     : {fs(alloc)}\nRequested               : "
            f"{fs(req)}\nDevice limit            : {fs(total)}\nFree (according to CUDA): "
            f"{fs(free)}\nPyTorch limit (set by user-supplied memory fraction)\n"
            f"                        : {fs(limit)}")


def doctor(text):
    d = gml.doctor(message=text)
    out = str(d)
    assert "?" not in out.replace("(most recent call last)", "")
    assert d.kind in ("outside_pytorch", "fragmentation", "exhaustion", "unexplained", "unknown")
    return d


# -- 1. kinds in order --------------------------------------------------------------------------

def test_a_request_larger_than_the_card_is_exhaustion_whatever_else_is_true():
    # a bare context at the start of a run: outside the allocator > reserved (~0)
    d = doctor(msg_2x(16 * GiB, 0, 15 * GiB + 200 * MiB, 14 * GiB + 700 * MiB, 0, 0))
    assert d.kind == "exhaustion" and d.details["rule"] == "request_larger_than_card"
    names = [f.name for f in d.fixes]
    assert "expandable_segments" not in names and "non_pytorch_memory" not in names
    assert not any(f.alloc_conf for f in d.fixes)
    assert any("cannot fit whatever" in x for x in d.details["left_out"])


def test_over_a_memory_fraction_is_exhaustion_against_the_cap():
    d = doctor(msg_2x(6 * GiB, 0, 40 * GiB, 20 * GiB, 15 * GiB, 19 * GiB, allowed=20 * GiB))
    assert d.kind == "exhaustion" and d.details["rule"] == "over_memory_fraction"
    assert d.fixes[0].name == "raise_memory_fraction"


@pytest.mark.parametrize("text, platform", [
    # Windows: 16 GiB free for a 1.1 GiB request
    (msg_2x(1126 * MiB, 0, 24 * GiB, 16 * GiB, 6 * GiB, 6 * GiB + 300 * MiB)
     + '\n  File "C:\\Users\\me\\ComfyUI\\execution.py", line 12', "windows"),
    # WSL2: 37 GiB free for 128 MiB
    (msg_2x(128 * MiB, 0, 48 * GiB, 37 * GiB, 9 * GiB, 10 * GiB)
     + "\nLinux 5.15.153.1-microsoft-standard-WSL2", "wsl"),
    # ROCm data-centre card: 203 GiB free for 2 MiB
    (msg_2x(2 * MiB, 0, 191 * GiB + 1000 * MiB, 191 * GiB + 900 * MiB, 0, 0, backend="HIP",
            hint=HINT_2X.replace("CUDA_ALLOC", "HIP_ALLOC")), "rocm"),
    # Intel GPU reporting free == total
    (xpu(512 * MiB, 16 * GiB, 16 * GiB, 3 * GiB, 3 * GiB + 100 * MiB), "xpu"),
])
def test_the_driver_had_room_is_unexplained_with_the_platforms_causes(text, platform):
    d = doctor(text)
    assert d.kind == "unexplained" and d.details["rule"] == "driver_had_room"
    assert "do not explain" in d.summary
    assert platform in d.details["platform"]
    assert not any(f.alloc_conf for f in d.fixes)          # no allocator setting can help
    assert d.fixes[-1].name == "driver_bug"
    expected = {"windows": "windows_shared_memory", "wsl": "wsl_memory_limit",
                "rocm": "rocm_driver", "xpu": "driver_bug"}[platform]
    assert expected in [f.name for f in d.fixes]


def test_free_just_above_the_request_is_borderline_not_unexplained():
    d = doctor(msg_2x(1 * GiB, 0, 24 * GiB, 1 * GiB + 20 * MiB, 20 * GiB, 22 * GiB + 600 * MiB))
    assert d.kind != "unexplained"
    assert any("about the" in b for b in d.details["borderline"])


def test_outside_memory_no_bigger_than_a_context_is_not_outside_pytorch():
    # 0.5 GiB outside the allocator covers the shortfall, but a context alone takes that much
    d = doctor(msg_1x(400 * MiB, 0, 8 * GiB, 7 * GiB, 100 * MiB, 7 * GiB + 400 * MiB))
    assert d.kind == "exhaustion"
    assert any("CUDA context" in b for b in d.details["borderline"])
    d = doctor(msg_2x(2 * GiB, 0, 24 * GiB, 1 * GiB, 5 * GiB, 6 * GiB, procs=[(999, 16 * GiB)]))
    assert d.kind == "outside_pytorch" and d.fixes[0].name == "other_processes"


def test_rounding_ties_are_called_borderline():
    # U and R print the same
    d = doctor(msg_2x(512 * MiB, 0, 24 * GiB, 100 * MiB, 20 * GiB, 20 * GiB + 512 * MiB))
    assert d.kind == "fragmentation"
    assert any("within the printed rounding" in b for b in d.details["borderline"])


# -- 2. 1.0-1.3 "cached" ------------------------------------------------------------------------

def test_cached_is_reserved_minus_allocated_so_nothing_goes_negative():
    # c10 1.0 printed amount_cached - amount_allocated: 120 MiB of 10.82 GiB reserved
    text = msg_1x(20 * MiB, 0, 11 * GiB + 170 * MiB, 10 * GiB + 700 * MiB, 9 * MiB,
                  10 * GiB + 820 * MiB, word="cached")
    d = doctor(text)
    assert d.reserved_unallocated_bytes >= 0 and d.details["doubtful"] == []
    assert d.kind == "fragmentation"          # 120 MiB cached free >= 20 MiB
    assert abs(d.non_pytorch_bytes - (11 * GiB + 170 * MiB - 9 * MiB - (10 * GiB + 820 * MiB))) \
        <= d.precision["non_pytorch_bytes"] + 1


# -- 3. parsing what people paste ---------------------------------------------------------------

BASE = msg_2x(1252 * MiB, 0, 15 * GiB + 790 * MiB, 959 * MiB, 14 * GiB + 10 * MiB,
              14 * GiB + 480 * MiB)


@pytest.mark.parametrize("paste", [
    "**torch.OutOfMemoryError: CUDA out of memory.** " + BASE[len("CUDA out of memory. "):],
    "`" + BASE + "`",
    "> " + BASE[:70] + "\n> " + BASE[70:160] + "\n> " + BASE[160:],
    "ErrorCUDA out of memory." + BASE[len("CUDA out of memory."):],        # glued word
    "\n".join("[rank0]: " + BASE[i:i + 64] for i in range(0, len(BASE), 64)),
    "\n".join("2024-05-01 12:00:01,123 - ERROR - " + BASE[i:i + 50]
              for i in range(0, len(BASE), 50)),
    BASE.replace(". ", "．").replace(":", "：").replace(",", "，"),            # full width
])
def test_pastes_read_the_same_figures(paste):
    ref = parse_message(BASE)
    m = parse_message(paste)
    for k in ("requested", "total", "free", "allocated", "unallocated"):
        assert getattr(m, k).bytes == getattr(ref, k).bytes, k
    assert m.device == 0 and m.missing == []


def test_cuda_malloc_async_with_and_without_figures():
    d = doctor(async_msg(9 * GiB + 440 * MiB, 640 * MiB, 11 * GiB + 600 * MiB, 7 * MiB))
    assert d.details["allocator"] == "cudaMallocAsync" and d.requested_bytes == 640 * MiB
    assert d.details["limit_bytes"] is None                  # SIZE_MAX: no fraction set
    assert any("SIZE_MAX" in x for x in d.details["doubtful"])
    assert any("max_split_size_mb" in x and "cudaMallocAsync" in x for x in d.details["left_out"])
    assert not any(f.alloc_conf for f in d.fixes)
    cut = doctor("!!! Exception during processing !!! torch.OutOfMemoryError: Allocation on device ")
    assert cut.kind == "unknown" and "no figures" in cut.summary
    assert cut.as_dict()["kind"] == "unknown"
    over = doctor(async_msg(7 * GiB, 2 * GiB, 24 * GiB, 10 * GiB, limit=8 * GiB))
    assert over.kind == "exhaustion" and over.details["rule"] == "over_memory_fraction"


def test_mps_messages_use_mps_figures_and_mps_remedies():
    d = doctor(mps(18 * GiB + 40 * MiB, 2 * GiB + 400 * MiB, 20 * GiB + 400 * MiB, 1 * GiB))
    assert d.kind == "exhaustion" and d.details["rule"] == "over_mps_limit"
    assert abs(d.details["other_allocations_bytes"] - (2 * GiB + 400 * MiB)) <= GiB // 200
    text = str(d) + json.dumps(d.as_dict())
    assert "PYTORCH_MPS_HIGH_WATERMARK_RATIO" in text and "torch.mps.empty_cache()" in text
    assert "PYTORCH_CUDA_ALLOC_CONF=" not in text and "expandable_segments:True" not in text
    below = doctor(mps(4 * GiB, 1 * GiB, 20 * GiB, 1 * GiB))
    assert below.kind == "unexplained"
    # releases before 2.1 printed binary multiples as "GB"
    old = parse_message("RuntimeError: MPS backend out of memory (MPS allocated: 18.04 GB, other "
                        "allocations: 2.39 GB, max allowed: 20.40 GB). Tried to allocate 1.00 GB "
                        "on private pool.")
    assert old.requested.bytes == GiB and old.limit.bytes == round(20.40 * GiB)


def test_hip_and_xpu_name_their_own_variables():
    frag = msg_2x(2 * GiB, 0, 64 * GiB, 100 * MiB, 50 * GiB, 60 * GiB, backend="HIP",
                  hint=HINT_2X.replace("CUDA_ALLOC", "HIP_ALLOC"))
    d = doctor(frag)
    assert d.kind == "fragmentation" and d.details["conf_variable"] == "PYTORCH_HIP_ALLOC_CONF"
    es = next(f for f in d.fixes if f.name == "expandable_segments")
    assert es.how.startswith("export PYTORCH_HIP_ALLOC_CONF=") and "2.11" in es.why
    x = doctor(xpu(2 * GiB, 16 * GiB, 100 * MiB, 8 * GiB, 14 * GiB))
    assert x.kind == "fragmentation" and "expandable_segments" not in [f.name for f in x.fixes]
    assert any(f.how.startswith("export PYTORCH_XPU_ALLOC_CONF=") for f in x.fixes)


def test_xpu_without_a_free_figure_never_prints_a_question_mark():
    d = doctor(xpu(2 * GiB, 16 * GiB, None, 15 * GiB, 15 * GiB + 100 * MiB))
    assert d.details["form"] == "xpu" and d.free_bytes is None
    assert d.kind == "exhaustion"            # A + R is over the card whatever else is free
    d = doctor(xpu(2 * GiB, 16 * GiB, None, 4 * GiB, 4 * GiB + 100 * MiB))
    assert d.kind == "unknown"


def test_intel_four_gib_limit_is_unexplained_by_figures():
    d = doctor("RuntimeError: Current platform can NOT allocate memory block with size larger than "
               "4GB! Tried to allocate 8.00 GiB (GPU  0; 15.56 GiB total capacity; 8.25 GiB "
               "already allocated; 8.60 GiB reserved in total by PyTorch)")
    assert d.kind == "unexplained" and d.fixes[0].name == "per_allocation_limit"


# -- 4. recommendations fit the platform --------------------------------------------------------

def test_no_expandable_segments_on_windows_or_when_already_on():
    frag = msg_2x(2 * GiB, 0, 24 * GiB, 100 * MiB, 18 * GiB, 23 * GiB)
    win = doctor(frag + '\nFile "D:\\stable-diffusion\\venv\\lib\\site-packages\\torch\\x.py"')
    assert "expandable_segments" not in [f.name for f in win.fixes]
    assert any("windows" in x for x in win.details["left_out"])
    on = doctor("I already run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" + frag)
    assert "expandable_segments" not in [f.name for f in on.fixes]
    assert on.details["settings_on"] == {"expandable_segments": "expandable_segments:True"}
    # PyTorch's own hint names the setting: that is not the user saying it is on
    assert doctor(frag).details["settings_on"] == {}


# -- 5. impossible figures ----------------------------------------------------------------------

def test_impossible_figures_are_flagged_once_and_never_shown_as_facts():
    wddm = doctor(msg_2x(1 * GiB, 0, 8 * GiB, 0, 22 * GiB, 22 * GiB + 300 * MiB)
                  + "\nC:\\Users\\me\\train.py")
    assert wddm.total_bytes is None and "card 8.00 GiB" not in str(wddm)
    assert len([x for x in wddm.details["doubtful"] if "more than the card's total" in x]) == 1
    assert "WDDM" in wddm.details["doubtful"][0]
    apu = doctor(msg_2x(1 * GiB, 0, 15 * GiB + 512 * MiB, 85 * GiB, 2 * GiB, 2 * GiB))
    assert apu.kind == "unexplained" and apu.total_bytes is None
    nvml = doctor(msg_2x(1 * GiB, 0, 24 * GiB, 100 * MiB, 20 * GiB, 22 * GiB,
                         procs=[(7, 17179869184 * GiB)]))
    assert any("2^64" in x for x in nvml.details["doubtful"]) or nvml.other_processes_bytes
    for d in (wddm, apu, nvml):
        for key in ("reserved_unallocated_bytes", "non_pytorch_bytes"):
            assert d.as_dict()[key] is None or d.as_dict()[key] >= 0


# -- 6. bad input -------------------------------------------------------------------------------

def test_no_oom_text_is_refused_in_one_line_and_half_read_forms_say_what_they_lack():
    with pytest.raises(NotAnOOMMessage, match="looked for"):
        gml.doctor(message="x" * 100_000)
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", "-"],
                         input="Segmentation fault", capture_output=True, text=True)
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    d = doctor("torch.cuda.OutOfMemoryError: CUDA out of memory.")
    assert d.kind == "unknown" and d.details["form"] == "first_sentence"
    assert any("could not read" in n for n in d.notes)


# -- 7. the JSON schema -------------------------------------------------------------------------

def _documented():
    """The message-mode fields of docs/DOCTOR.md's JSON schema: name -> type words."""
    text = DOCS.read_text()
    part = text.split("### Message mode", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    rows = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0] != "`field`":
            rows[cells[0].strip("`")] = cells[1]
    return rows


_TYPES = {"int": int, "str": str, "list": list, "dict": dict, "bool": bool, "null": type(None)}


@pytest.mark.parametrize("text", [
    msg_2x(1252 * MiB, 0, 15 * GiB + 790 * MiB, 959 * MiB, 14 * GiB + 10 * MiB,
           14 * GiB + 480 * MiB, procs=[(12447, 2 * GiB)], this=14 * GiB + 900 * MiB),
    mps(4 * GiB, 1 * GiB, 20 * GiB, 1 * GiB),
    "torch.OutOfMemoryError: Allocation on device",
])
def test_json_carries_exactly_the_documented_fields_with_their_types(text):
    doc = _documented()
    out = json.loads(gml.doctor(message=text).json())
    assert out["schema_version"] == 1
    top = {k for k in doc if "." not in k}
    assert set(out) == top
    details = {k.split(".", 1)[1] for k in doc if k.startswith("details.")}
    assert set(out["details"]) == details
    fix_fields = {k.split(".", 1)[1] for k in doc if k.startswith("fixes[].")}
    for fix in out["fixes"]:
        assert set(fix) == fix_fields
    for key, types in doc.items():
        allowed = tuple(_TYPES[t.strip()] for t in types.replace("`", "").split(" or "))
        if key.startswith("details."):
            value = out["details"][key.split(".", 1)[1]]
        elif key.startswith("fixes[]."):
            for fix in out["fixes"]:
                assert isinstance(fix[key.split(".", 1)[1]], allowed), key
            continue
        else:
            value = out[key]
        assert isinstance(value, allowed) and not isinstance(value, bool) or bool in allowed, key


# -- routing, reports, long pastes --------------------------------------------------------------

def test_unexplained_summary_names_the_causes_that_fit():
    win = doctor(msg_2x(1126 * MiB, 0, 24 * GiB, 16 * GiB, 6 * GiB, 6 * GiB + 300 * MiB)
                 + '\n  File "C:\\Users\\me\\ComfyUI\\execution.py", line 12')
    assert "WDDM" in win.summary
    bare = doctor(msg_2x(128 * MiB, 0, 48 * GiB, 37 * GiB, 9 * GiB, 10 * GiB))
    assert "names no platform" in bare.summary and "WSL2" in bare.summary


def test_every_message_form_is_routed_to_message_mode():
    for text in ("torch.OutOfMemoryError: Allocation on device",
                 mps(4 * GiB, 1 * GiB, 20 * GiB, 1 * GiB),
                 "Tried to allocate 2.00 MiB (GPU 0; ...) CUDA out of memory."):
        assert gml.doctor(text).mode == "message"


def test_html_report_of_a_message_shows_what_was_doubtful_and_left_out():
    d = doctor(msg_2x(1 * GiB, 0, 8 * GiB, 0, 22 * GiB, 22 * GiB + 300 * MiB)
               + "\n<img src=x onerror=alert(1)> C:\\Users\\me\\train.py")
    page = d.html()
    assert "Doubtful figures" in page and "Not recommended" in page
    assert "<img" not in page


def test_a_long_log_reads_its_last_message():
    first = msg_2x(1 * GiB, 0, 24 * GiB, 100 * MiB, 20 * GiB, 23 * GiB)
    last = msg_2x(3 * GiB, 1, 80 * GiB, 1 * GiB, 70 * GiB, 78 * GiB)
    log = ("step 1 loss 0.5 " + "a" * 5000 + "\n") * 200
    d = doctor(log + first + "\n" + log + last)
    assert d.device == 1 and d.requested_bytes == 3 * GiB
    assert any("2 out-of-memory messages" in n for n in d.notes)


def test_a_setting_the_text_says_is_set_is_not_recommended_again():
    frag = msg_2x(2 * GiB, 0, 24 * GiB, 100 * MiB, 18 * GiB, 23 * GiB)
    d = doctor("export PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512\n" + frag)
    assert "max_split_size_mb" not in [f.name for f in d.fixes]
    assert any("max_split_size_mb:512" in x for x in d.details["left_out"])


def test_device_index_printed_as_a_character():
    # c10::DeviceIndex is int8_t: device 0 became a NUL that ended the text, device 1 a 0x01 byte
    cut = doctor("torch.OutOfMemoryError: Allocation on device \nPrompt executed in 3.20 seconds")
    assert cut.device == 0 and cut.kind == "unknown" and "NUL" in cut.summary
    one = parse_message(async_msg(1 * GiB, 2 * GiB, 8 * GiB, 1 * GiB).replace("device 0 ",
                                                                               "device \x01 "))
    assert one.device == 1 and one.truncated is None and one.requested.bytes == 2 * GiB
    native = doctor("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU ")
    assert native.device == 0 and any("NUL" in n for n in native.notes)
    two = parse_message(msg_2x(20 * MiB, 0, 8 * GiB, 1 * MiB, 7 * GiB, 8 * GiB - 10 * MiB)
                        .replace("GPU 0 has", "GPU \x02 has"))
    assert two.device == 2 and two.total is not None
