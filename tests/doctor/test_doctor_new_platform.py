"""A new platform is one class: a subclass of PlatformKind added to PLATFORMS changes detection,
the allocator variable in every fix, which settings are offered and in what order, the causes
named for an unexplained OOM and the platform's own fixes, with no other module touched."""
import time

from gpumemlab.doctor.diagnosis import Fix
from gpumemlab.doctor.message import platform as platform_module
from gpumemlab.doctor.message.mode import diagnose_message
from gpumemlab.doctor.message.platform import PLATFORMS, PlatformKind

import re


class Tachyon(PlatformKind):
    """An imaginary accelerator whose builds read their own variable, have no expandable
    segments and may ignore max_split_size_mb."""
    name, what = "tachyon", "a Tachyon card"
    clue = re.compile(r"\bTachyon T\d\b")
    conf_variable = "PYTORCH_TACHYON_ALLOC_CONF"
    expandable = "no"
    cause = "the Tachyon runtime"

    def supports(self, setting):
        return "no" if setting == "expandable_segments" else "maybe"

    def caveat(self, setting):
        return "Tachyon builds before 3.0 ignore it"

    def fixes(self, msg, requested):
        return [Fix("tachyon_runtime", "the Tachyon runtime refused", how="update it")]


# the shape of https://github.com/pytorch/pytorch/issues/16417 (fragmentation), on the new card
FRAGMENTED = ("Tachyon T4 device\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
              "220.00 MiB. GPU 0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. "
              "Of the allocated memory 22.90 GiB is allocated by PyTorch, and 694.87 MiB is "
              "reserved by PyTorch but unallocated.")
# the shape of https://github.com/pytorch/pytorch/issues/59778 (free memory held the request)
ROOMY = ("Tachyon T4 device\nCUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB "
         "total capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total "
         "by PyTorch)")


def test_a_new_platform_is_one_class(monkeypatch):
    before = diagnose_message(FRAGMENTED)
    assert "tachyon" not in before.details["platform"]
    assert [f.name for f in before.fixes][:2] == ["expandable_segments", "max_split_size_mb"]
    monkeypatch.setattr(platform_module, "PLATFORMS", PLATFORMS + [Tachyon()])
    d = diagnose_message(FRAGMENTED)
    assert d.details["platform"] == ["tachyon"]
    assert "Tachyon T4" in d.details["platform_evidence"]["tachyon"]
    assert d.details["conf_variable"] == "PYTORCH_TACHYON_ALLOC_CONF"
    names = [f.name for f in d.fixes]
    assert "expandable_segments" not in names
    assert any(line.startswith("expandable_segments: not available on tachyon")
               for line in d.details["left_out"])
    split = next(f for f in d.fixes if f.name == "max_split_size_mb")
    assert split.how.startswith("export PYTORCH_TACHYON_ALLOC_CONF=")
    assert "Tachyon builds before 3.0 ignore it" in split.why
    # "maybe" ranks after the fixes that surely apply
    assert names.index("reduce_peak_memory") < names.index("max_split_size_mb")
    u = diagnose_message(ROOMY)
    assert u.kind == "unexplained" and "the Tachyon runtime" in u.summary
    assert [f.name for f in u.fixes][0] == "tachyon_runtime"


def test_a_1_mb_paste_of_repeated_heads_stays_linear():
    # every head is a candidate; the work per head is bounded (a prefix window, one match)
    head = "CUDA out of memory. Tried to allocate "
    small, big = head * 2_600, head * 26_000
    t = time.perf_counter()
    diagnose_message(small + "2.00 MiB")
    t_small = time.perf_counter() - t
    t = time.perf_counter()
    diagnose_message(big + "2.00 MiB")
    t_big = time.perf_counter() - t
    # ten times the text: well under a hundred times the time (quadratic would be 100x)
    assert t_big < 30 * max(t_small, 0.005), (t_small, t_big)
