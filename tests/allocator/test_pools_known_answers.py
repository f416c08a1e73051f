"""Known answers for private pools and CUDA graphs, each derived from c10's source (the reasoning
is in the docstring), and bad input: a clear error and the allocator unchanged."""
import threading

import pytest

import gpumemlab as gml
from gpumemlab.allocator.private_pool import PoolError

MiB = 1024 * 1024


def state(gpu):
    """Everything a refused call must leave as it was."""
    a = gpu.allocator
    return (gpu.memory_snapshot(), gpu.memory_stats(),
            {pid: (pp.use_count, pp.cudaMalloc_count) for pid, pp in a.graph_pools.items()},
            dict(a.graph_pools_freeable), list(pid for pid, _ in a.captures_underway),
            a.num_active_captures)


def test_ids_as_generate_mempool_id():
    """User-created ids are (0, n) and graph-created ones (n, 0), both counters from 1
    (c10 generate_mempool_id); graph_pool_handle() draws from the user counter."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    assert gpu.MemPool().id == (0, 1)
    assert gpu.graph_pool_handle() == (0, 2)
    g = gpu.CUDAGraph()
    with gpu.graph(g):
        pass
    assert g.pool() == (1, 0)


def test_pool_blocks_never_serve_the_default_pool():
    """get_pool only returns a private BlockPool for a diverted request, and get_free_block
    searches only the request's pool: a 1 MiB block cached in a MemPool is not reused by a
    default-pool request of the same size, which gets a new 2 MiB small segment."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        x = gpu.empty(MiB)
    x_address = x.address
    del x
    y = gpu.empty(MiB)
    assert y.address != x_address
    assert gpu.memory_reserved() == 2 * 2 * MiB
    segs = {s["address"]: s["segment_pool_id"] for s in gpu.memory_snapshot()}
    assert sorted(segs.values()) == [(0, 0), (0, 1)]
    gpu.check_invariants()


def test_empty_cache_keeps_a_live_pool_and_frees_a_released_one():
    """release_cached_blocks frees a private pool's segments only once the pool is freeable
    (use_count 0): while the MemPool lives, empty_cache() keeps its free 20 MiB segment; the
    pool's destructor (releasePool, then emptyCache(id)) gives it back and forgets the pool."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        x = gpu.empty(20 * MiB)
    del x
    gpu.empty_cache()
    assert gpu.memory_reserved() == 20 * MiB
    assert len(pool.snapshot()) == 1
    del pool
    assert gpu.memory_reserved() == 0
    assert gpu.allocator.graph_pools == {}


def test_tensor_outliving_its_pool():
    """~MemPool releases the pool, but a live block keeps its segment (cudaMalloc_count 1): the
    pool stays freeable until the block is freed and the next empty_cache frees the segment and
    erases the pool."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    pool = gpu.MemPool()
    pid = pool.id
    with gpu.use_mem_pool(pool):
        x = gpu.empty(3 * MiB)
    del pool
    a = gpu.allocator
    assert pid in a.graph_pools_freeable and a.graph_pools[pid].cudaMalloc_count == 1
    assert gpu.memory_reserved() == 20 * MiB
    del x
    gpu.check_invariants()
    assert gpu.memory_reserved() == 20 * MiB  # freed into the pool, still cached
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0 and a.graph_pools == {}


def test_oom_message_counts_private_pools():
    """The OOM message adds the free cached bytes of every private pool ("allocated in private
    pools") to the allocated figure and subtracts them from the unallocated one."""
    gpu = gml.SimulatedGPU("64MiB", alloc_conf="")
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        x = gpu.empty(40 * MiB)
    del x
    with pytest.raises(gml.OutOfMemoryError) as err:
        gpu.empty(30 * MiB)
    msg = str(err.value)
    assert "Of the allocated memory 40.00 MiB is allocated by PyTorch, with 40.00 MiB allocated " \
           "in private pools (e.g., CUDA Graphs), and 0 bytes is reserved by PyTorch but " \
           "unallocated." in msg


def test_reserved_bytes_by_private_pools():
    """memory_stats' reserved_bytes_by_private_pools: per pool id, flattened "0_1", the pool's
    own reserved bytes (a small 2 MiB segment here), beside the aggregate reserved_bytes."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        x = gpu.empty(512)
    stats = gpu.memory_stats()
    assert stats["reserved_bytes_by_private_pools.0_1.all.current"] == 2 * MiB
    assert stats["reserved_bytes_by_private_pools.0_1.small_pool.current"] == 2 * MiB
    assert stats["reserved_bytes_by_private_pools.0_1.large_pool.current"] == 0
    assert stats["reserved_bytes.all.current"] == 2 * MiB
    nested = gpu.memory_stats_as_nested_dict()["reserved_bytes_by_private_pools"]
    assert nested[(0, 1)]["all"]["peak"] == 2 * MiB
    del x


def test_two_graphs_share_one_pool_and_reset_gives_it_back():
    """Graphs captured one after the other into one pool (graph_pool_handle()): each capture
    increfs it (use_count 2); the second graph's allocations reuse what the first freed; reset()
    releases one reference each, and only then empty_cache() frees the pool's memory."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    handle = gpu.graph_pool_handle()
    g1, g2 = gpu.CUDAGraph(), gpu.CUDAGraph()
    with gpu.graph(g1, pool=handle):
        tmp = gpu.empty(8 * MiB)
        tmp_address = tmp.address
        del tmp
        out1 = gpu.empty(MiB)
    with gpu.graph(g2, pool=g1.pool()):
        tmp2 = gpu.empty(8 * MiB)
        del tmp2
    assert tmp_address != 0
    assert gpu.allocator.get_pool_use_count(handle) == 2
    pool_reserved = gpu.memory_stats()["reserved_bytes_by_private_pools.0_1.all.current"]
    assert pool_reserved == 20 * MiB + 2 * MiB  # one large segment reused by both, one small
    g1.reset()
    gpu.empty_cache()
    assert gpu.memory_reserved() == 22 * MiB
    g2.reset()
    del out1
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0
    gpu.check_invariants()


def test_replay_makes_no_allocator_call():
    """CUDAGraph::replay launches the graph exec; the allocator sees nothing (no trace entry)."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    g = gpu.CUDAGraph()
    with gpu.graph(g):
        out = gpu.empty(MiB)
    before = (gpu.memory_stats(), len(gpu.allocator.trace()))
    for _ in range(3):
        g.replay()
    assert (gpu.memory_stats(), len(gpu.allocator.trace())) == before
    del out


def test_use_mem_pool_is_thread_local():
    """use_mem_pool's filter compares thread ids: another thread's allocation during the context
    goes to the default pool."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    pool = gpu.MemPool()
    other = []
    with gpu.use_mem_pool(pool):
        mine = gpu.empty(512)
        t = threading.Thread(target=lambda: other.append(gpu.empty(512)))
        t.start()
        t.join()
    ids = {s["address"]: s["segment_pool_id"] for s in gpu.memory_snapshot()}
    seg_of = {a.address: pid for a in (mine, other[0]) for addr, pid in ids.items()
              if addr <= a.address < addr + 2 * MiB}
    assert seg_of[mine.address] == pool.id and seg_of[other[0].address] == (0, 0)


def test_empty_cache_during_capture_keeps_the_default_cache():
    """release_cached_blocks skips the default pools while a graph capture is underway (newest
    c10: is_capture_context) and the OOM path skips the emptying retry."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    x = gpu.empty(20 * MiB)
    del x
    g = gpu.CUDAGraph()
    s = gpu.Stream()
    with gpu.stream(s):
        g.capture_begin()
        gpu.empty_cache()
        assert gpu.memory_reserved() == 20 * MiB
        g.capture_end()
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0


def test_graph_capture_record_stream_reuse_is_reported():
    """The setting is parsed and reported; the model always defers (see SOURCE_MAP)."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="graph_capture_record_stream_reuse:True")
    assert gpu.snapshot()["allocator_settings"]["graph_capture_record_stream_reuse"] is True


# ----------------------------------------------------------------------------- bad input


def test_bad_input_changes_nothing():
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    other_gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    pool = gpu.MemPool()
    foreign = other_gpu.MemPool()
    with gpu.use_mem_pool(pool):
        keep = gpu.empty(MiB)
    before = state(gpu)
    with pytest.raises(PoolError, match="belongs to another device"):
        with gpu.use_mem_pool(foreign):
            pass
    with pytest.raises(TypeError, match="takes a MemPool"):
        with gpu.use_mem_pool((0, 1)):
            pass
    with pytest.raises(TypeError, match="use_on_oom must be a bool"):
        gpu.MemPool(use_on_oom="yes")
    with gpu.use_mem_pool(pool):
        mid = state(gpu)
        with pytest.raises(PoolError, match="already recording to mempool_id"):
            with gpu.use_mem_pool(pool):
                pass
        assert state(gpu) == mid
    g = gpu.CUDAGraph()
    with pytest.raises(PoolError, match="non-default stream"):
        g.capture_begin(stream=0)
    with pytest.raises(ValueError, match="capture stream"):
        g.capture_begin(stream=-1)
    with pytest.raises(PoolError, match="not made on this device"):
        g.capture_begin(pool=(0, 99), stream=gpu.Stream())
    with pytest.raises(PoolError, match="another device"):
        g.capture_begin(pool=foreign, stream=gpu.Stream())
    with pytest.raises(PoolError, match="tuple of two non-negative ints"):
        g.capture_begin(pool=(1, -1), stream=gpu.Stream())
    with pytest.raises(PoolError, match="without a preceding successful capture"):
        g.replay()
    with pytest.raises(PoolError, match="without a preceding successful capture"):
        g.pool()
    with pytest.raises(PoolError, match="tuple of two"):
        gpu.memory_snapshot(mempool_id="pool")
    assert state(gpu) == before
    gpu.check_invariants()
    del keep


def test_released_graph_pool_cannot_be_joined():
    """A graph pool whose last graph was reset (use_count 0) but still holds a live block is
    freeable; c10 asserts when a capture tries to join it: here a clear error, nothing changed."""
    gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
    g = gpu.CUDAGraph()
    with gpu.graph(g):
        out = gpu.empty(MiB)
    pid = g.pool()
    g.reset()
    before = state(gpu)
    g2 = gpu.CUDAGraph()
    with pytest.raises(PoolError, match="was released"):
        with gpu.graph(g2, pool=pid):
            pass
    assert state(gpu)[2:] == before[2:]
    gpu.check_invariants()
    del out
