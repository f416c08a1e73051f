"""PYTORCH_CUDA_ALLOC_CONF parsing, following the newest c10 AllocatorConfig parser."""
import pytest

import gpumemlab as gml
from gpumemlab.allocator import AllocatorConfig, AllocatorConfigError, alloc_conf_from_environ

MiB = 1024 * 1024


def test_defaults():
    c = AllocatorConfig.parse("")
    d = c.settings_dict()
    assert d["max_split_size"] == -1 and d["expandable_segments"] is False
    assert d["garbage_collection_threshold"] == 0.0
    assert list(d["roundup_power2_divisions"]) == [str(1 << i) for i in range(16)]
    assert d["PYTORCH_CUDA_ALLOC_CONF"] == ""


def test_full_string_with_spaces():
    c = AllocatorConfig.parse(" max_split_size_mb : 128 , garbage_collection_threshold:0.6,"
                              "expandable_segments:True, roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
    assert c.max_split_size == 128 * MiB
    assert c.garbage_collection_threshold == 0.6
    assert c.expandable_segments is True
    # Newest c10: '>' fills from the slot after the last explicit one.
    assert c.roundup_power2_divisions_ == [1] * 9 + [2, 4] + [8] * 5


@pytest.mark.parametrize("bad, message", [
    ("foo:1", "Unrecognized key 'foo' in Accelerator allocator config."),
    ("expandable_segments:true", "Expected 'True' or 'False' at index 2 in ConfigTokenizer but got 'true'"),
    ("max_split_size_mb:19", "CachingAllocator option max_split_size_mb too small, must be >= 20"),
    ("max_non_split_rounding_mb:5", "CachingAllocator option max_non_split_rounding_mb too small, must be >= 20"),
    ("garbage_collection_threshold:1.0", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
    ("garbage_collection_threshold:0", "garbage_collect_threshold is invalid, set it in (0.0, 1.0)"),
    ("roundup_power2_divisions:3", "For roundups, the divisions has to be power of 2 "),
    ("roundup_power2_divisions:[256:3]", "For roundups, the divisions has to be power of 2 or 0 to disable roundup "),
    ("roundup_power2_divisions:[300:2]", "For roundups, the intervals have to be power of 2 "),
    ("max_split_size_mb", "Index out of bounds in ConfigTokenizer"),
    ("large_segment_size_mb:10", "CachingAllocator option large_segment_size_mb must be > 10 MB"),
    ("pinned_num_register_threads:3", "Number of register threads has to be power of 2, got 3"),
    ("per_process_memory_fraction:1.5", "per_process_memory_fraction is invalid, set it in [0.0, 1.0]"),
    ("backend:magic", "Unknown allocator backend, options are native and cudaMallocAsync"),
])
def test_errors_match_pytorch(bad, message):
    with pytest.raises(AllocatorConfigError) as info:
        AllocatorConfig.parse(bad)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)


def test_large_segment_size_moves_segments_and_bounds():
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="large_segment_size_mb:40", record_frames=False)
    a = gpu.empty(5 * MiB)
    assert gpu.memory_reserved() == 40 * MiB
    with pytest.raises(ValueError, match=">= 40"):
        AllocatorConfig.parse("large_segment_size_mb:40,max_split_size_mb:30")
    del a


def test_set_allocator_settings_resets_the_three_and_keeps_others():
    c = AllocatorConfig.parse("expandable_segments:True,max_split_size_mb:64,roundup_power2_divisions:4")
    c.apply("garbage_collection_threshold:0.5")
    assert c.expandable_segments is True  # kept
    assert c.max_split_size == 2**64 - 1 and c.roundup_power2_divisions_ == [0] * 16  # reset
    assert c.last_allocator_settings == "garbage_collection_threshold:0.5"


def test_failed_parse_changes_nothing():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="max_split_size_mb:64", record_frames=False)
    before = gpu.snapshot()["allocator_settings"]
    with pytest.raises(ValueError):
        gpu.set_allocator_settings("expandable_segments:True,max_split_size_mb:1")
    assert gpu.snapshot()["allocator_settings"] == before


def test_environment_variables(monkeypatch):
    assert alloc_conf_from_environ({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}) == "expandable_segments:True"
    # The first one set wins, in c10's order: the CUDA-specific name first.
    env = {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert alloc_conf_from_environ(env) == "max_split_size_mb:64"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    gpu = gml.SimulatedGPU("1GiB")
    assert gpu.snapshot()["allocator_settings"]["expandable_segments"] is True
    assert gml.SimulatedGPU("1GiB", alloc_conf="").snapshot()["allocator_settings"]["expandable_segments"] is False


def test_type_error_for_non_string():
    with pytest.raises(TypeError):
        AllocatorConfig.parse(None or 5)
