"""Pastes written in the shape of real ones (torchrun ranks in a container, a vLLM worker, an
Intel XPU request over 4 GiB) that read wrongly in a fresh-eyes run of ``gpumemlab doctor``."""
from gpumemlab.doctor.message.mode import diagnose_message

GiB = 1 << 30

RANKS = ("[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 "
         "has a total capacity of 79.15 GiB of which 1.31 GiB is free. Process 2871 has 19.20 GiB "
         "memory in use. Process 2872 has 19.20 GiB memory in use. Process 2873 has 19.20 GiB "
         "memory in use. Process 2874 has 20.22 GiB memory in use. Of the allocated memory 17.41 "
         "GiB is allocated by PyTorch, and 1.06 GiB is reserved by PyTorch but unallocated.")
VLLM_WORKER = ("ERROR 05-12 09:14:09 [core.py:396] torch.OutOfMemoryError: CUDA out of memory. "
               "Tried to allocate 2.32 GiB. GPU 0 has a total capacity of 23.58 GiB of which 1.12 "
               "GiB is free. Process 3812 has 22.45 GiB memory in use. Of the allocated memory "
               "21.80 GiB is allocated by PyTorch, and 117.36 MiB is reserved by PyTorch but "
               "unallocated.")
XPU_BIG = ("RuntimeError: XPU out of memory. Tried to allocate 4.50 GiB. GPU 0 has a total capacity "
           "of 15.11 GiB. Of the allocated memory 9.80 GiB is allocated by PyTorch, and 512.00 MiB "
           "is reserved by PyTorch but unallocated. Please use `empty_cache` to release all "
           "unoccupied cached memory.")


def test_the_other_processes_figure_leaves_out_this_very_process():
    d = diagnose_message(RANKS)
    assert d.details["this_process_pid"] == 2871
    assert d.other_processes_bytes == round(19.20 * GiB) * 2 + round(20.22 * GiB)
    assert "58.62 GiB" in d.summary and "other processes 58.62 GiB" in str(d)
    d = diagnose_message(VLLM_WORKER)
    assert d.details["this_process_pid"] == 3812
    assert d.other_processes_bytes is None and "other processes" not in str(d).split(
        "figures:", 1)[1].splitlines()[0]
    assert d.kind == "exhaustion"


def test_an_xpu_request_over_4_gib_names_the_per_allocation_limit():
    d = diagnose_message(XPU_BIG)
    assert d.kind == "unknown" and "no free-memory figure" in d.summary
    # 10.30 GiB held + 4.50 GiB on a 15.11 GiB card: the card may have been full too, so the
    # kind stays open, but the limit is named first and holding less always helps
    assert [f.name for f in d.fixes] == ["per_allocation_limit", "reduce_peak_memory"]
    # under 4 GiB there is nothing the platform adds
    small = diagnose_message(XPU_BIG.replace("4.50 GiB.", "3.50 GiB."))
    assert [f.name for f in small.fixes] == ["reduce_peak_memory"]


# the 1.4-2.0 form (its hint names max_split_size_mb, so 1.10-2.0), with full-width punctuation
OLD_FORM = ("RuntimeError\uff1aCUDA out of memory\uff0eTried to allocate 128.00 MiB (GPU 0; 3.82 GiB "
            "total capacity; 2.37 GiB already allocated; 37.62 MiB free; 2.55 GiB reserved in "
            "total by PyTorch) If reserved memory is >> allocated memory try setting "
            "max_split_size_mb to avoid fragmentation.")


def test_a_release_without_expandable_segments_gets_its_own_setting_first():
    d = diagnose_message(OLD_FORM)
    assert d.kind == "fragmentation"
    names = [f.name for f in d.fixes]
    assert names.index("max_split_size_mb") < names.index("expandable_segments")
    assert "upgrade first" in d.fixes[names.index("expandable_segments")].why


# a 4 GiB laptop card on Windows (the shape of stable-diffusion-webui pastes): 1.24 GiB outside
WINDOWS_SMALL = ("  File \"D:\\stable-diffusion-webui\\venv\\lib\\site-packages\\torch\\nn\\modules\\"
                 "conv.py\", line 456, in _conv_forward\ntorch.cuda.OutOfMemoryError: CUDA out of "
                 "memory. Tried to allocate 640.00 MiB. GPU 0 has a total capacity of 4.00 GiB of "
                 "which 0 bytes is free. Of the allocated memory 2.61 GiB is allocated by PyTorch, "
                 "and 151.21 MiB is reserved by PyTorch but unallocated.")


def test_memory_outside_pytorch_on_windows_names_the_desktop():
    d = diagnose_message(WINDOWS_SMALL)
    assert d.details["platform"] == ["windows"] and d.kind == "outside_pytorch"
    assert "windows_desktop_memory" in [f.name for f in d.fixes]
    linux = diagnose_message(WINDOWS_SMALL.split("\n", 1)[1])
    assert "windows_desktop_memory" not in [f.name for f in linux.fixes]
