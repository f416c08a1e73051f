"""Start-up budget: vLLM's arithmetic by hand, the graph pool against the allocator's reuse, bad input."""
import pytest

from gpumemlab.kvcache.startup_budget import REDUNDANCY_BUFFER, BudgetError, budget
from gpumemlab.kvcache.graph_pools import graph_pool, vllm_capture_sizes
from gpumemlab.kvcache.sizing import ModelShape
from gpumemlab.units import GiB, MiB

TOY = ModelShape("toy", 2, 2, 64, 1, 2048)      # page = 2 x 16 x 2 x 64 x 2 B = 8 KiB per layer


def test_hand_computed_budget():
    b = budget(10 * GiB, TOY, total_memory="40GiB", gpu_memory_utilization=0.5,
               activation_peak=1 * GiB, non_torch_memory=512 * MiB)
    # requested 20 GiB - weights 10 - activations 1 - non-torch 0.5 = 8.5 GiB for the KV cache
    assert b.requested == 20 * GiB and b.available_kv == 8.5 * GiB
    assert b.page_bytes == 8192
    assert b.num_blocks == int(8.5 * GiB) // 8192 // 2 == 557056
    assert b.kv_tokens == 557056 * 16
    assert b.blocks_per_request == 128 and b.max_concurrency == 557056 / 128 == 4352.0
    assert b.suggested_kv_memory == int(8.5 * GiB) - REDUNDANCY_BUFFER
    assert b.suggested_kv_memory_gpu == 40 * GiB - int(11.5 * GiB) - REDUNDANCY_BUFFER
    assert b.fits and b.within_request and b.peak_used == 20 * GiB


def _mib_traces(size):
    """A capture of batch ``size`` takes ``size`` MiB once and gives it back."""
    return (("alloc", 1, size * MiB), ("free", 1, size * MiB))


def test_graph_pool_reserved_follows_the_allocators_reuse():
    pool = graph_pool(_mib_traces, (1, 2, 3, 4))
    # 4 MiB (between 1 and 10 MiB) gets a 20 MiB segment in the shared pool; the 3 and 2 MiB
    # captures reuse its freed block. 1 MiB is a small request (<= 1 MiB): the small pool
    # cannot use the large segment, so it takes a 2 MiB segment of its own.
    assert pool.sizes == (4, 3, 2, 1)
    assert pool.increments == (20 * MiB, 0, 0, 2 * MiB)
    assert pool.reserved_bytes == 22 * MiB
    # vLLM's rule: first capture 20 MiB + (4 - 1) x max(second = 0, 1 MiB)
    assert (pool.first_bytes, pool.per_graph_bytes) == (20 * MiB, 1 * MiB)
    assert pool.estimate_bytes == 23 * MiB and pool.error_bytes == 1 * MiB


def test_graph_pool_grows_when_a_larger_segment_is_needed():
    # 12 MiB rounds to a 12 MiB segment of its own (> 10 MiB: exact 2 MiB multiple); the 4 MiB
    # capture splits that cached segment, so the pool stays at 12 MiB.
    pool = graph_pool(_mib_traces, (4, 12))
    assert pool.increments == (12 * MiB, 0) and pool.reserved_bytes == 12 * MiB
    assert pool.estimate_bytes == 12 * MiB + 1 * MiB


def _kept_output_traces(size):
    """A capture of batch ``size`` leaves a ``size`` MiB output behind."""
    return (("alloc", 1, size * MiB),)


def test_kept_outputs_make_the_pool_grow_past_the_estimate():
    # weak references (vLLM): 12 MiB gets its own segment; 10 and 8 MiB split it once freed
    shared = graph_pool(_kept_output_traces, (12, 10, 8))
    assert shared.reserved_bytes == 12 * MiB and shared.estimate_bytes == 12 * MiB + 2 * MiB
    # outputs kept alive: 12 and 10 MiB (>= 10 MiB: exact segments), then 8 MiB in a 20 MiB one
    kept = graph_pool(_kept_output_traces, (12, 10, 8), keep_outputs=True)
    assert kept.increments == (12 * MiB, 10 * MiB, 20 * MiB) and kept.reserved_bytes == 42 * MiB
    # the estimate: 12 + 2 x 10 = 32 MiB, 10 MiB short of what the pool holds
    assert kept.estimate_bytes == 32 * MiB and kept.error_bytes == -10 * MiB


def test_default_capture_sizes_are_vllms():
    sizes = vllm_capture_sizes(512)
    assert sizes[:4] == (1, 2, 4, 8) and sizes[-1] == 512 and len(sizes) == 51


def test_activation_peak_from_a_capture_is_replayed():
    torch = pytest.importorskip("torch")
    import gpumemlab as gml
    lin = torch.nn.Linear(64, 128)
    x = torch.randn(1024, 64)
    with torch.inference_mode(), gml.capture(lin, frames=False) as cap:
        lin(x)
    b = budget(lin, TOY, total_memory="1GiB", activation_peak=cap)
    assert b.weights == (64 * 128 + 128) * 4
    assert b.activation_peak == 1024 * 128 * 4        # the output, 512 KiB, the only new tensor


def test_graphs_not_counted_run_out_during_capture():
    b = budget(10 * GiB, TOY, total_memory="16GiB", gpu_memory_utilization=1.0,
               capture_sizes=(4, 2, 1), graph_traces=_mib_traces, estimate_cudagraphs=False)
    assert not b.fits and "capturing the CUDA graphs" in b.failure and "short" in b.failure
    counted = budget(10 * GiB, TOY, total_memory="16GiB", gpu_memory_utilization=1.0,
                     capture_sizes=(4, 2, 1), graph_traces=_mib_traces)
    assert counted.fits and counted.graph_reserved == 22 * MiB      # 20 MiB + a 2 MiB small segment
    assert counted.available_kv == 6 * GiB - 22 * MiB              # estimate 20 + 2 x 1 MiB


@pytest.mark.parametrize("kwargs, words", [
    ({"gpu_memory_utilization": 1.2}, "0.2 above 1"),
    ({"gpu_memory_utilization": 0}, "must be above 0"),
    ({"gpu_memory_utilization": -0.5}, "must be above 0"),
    ({"block_size": 0}, "block_size 0"),
    ({"gpu_memory_utilization": 0.2}, "do not fit in the requested 8.00 GiB (0.2 x 40.00 GiB) by 2.00 GiB"),
    ({"activation_peak": 30 * GiB}, "exceed the requested 36.00 GiB by 4.00 GiB"),
    ({"activation_peak": 31 * GiB}, "the profile run at the largest batch ran out of memory"),
    ({"other_memory": 8 * GiB}, "less than the requested 36.00 GiB by 4.00 GiB"),
    ({"capture_sizes": (4, 0)}, "capture sizes must be positive ints, got 0"),
])
def test_bad_input_is_one_line_with_the_excess(kwargs, words):
    with pytest.raises(BudgetError) as info:
        budget(10 * GiB, TOY, total_memory="40GiB", **{"gpu_memory_utilization": 0.9, **kwargs})
    message = str(info.value)
    assert "\n" not in message and words in message


def test_kv_cache_too_small_for_one_request():
    big = ModelShape("big", 80, 64, 128, 1, 32768)
    with pytest.raises(BudgetError, match="one request of 32768 tokens needs 2048 blocks"):
        budget(70 * GiB, big, total_memory="80GiB", gpu_memory_utilization=0.9)
