"""Ports of PyTorch's MemPool and CUDA-graph memory tests to the simulated GPU.

Sources: pytorch/pytorch test/test_cuda.py (TestCuda: test_graph_two_successive,
test_graph_three_successive, test_graph_memory_stats_and_use_result_after_destroy_graph,
test_graph_record_stream, test_graph_capture_oom; TestMemPool). The newest TestMemPool tests
(test_mempool_release_cached_blocks_during_diversion, test_mempool_oom_recovery_releases_cached_blocks,
test_mempool_block_free_not_deferred, test_mempool_no_split, test_deleted_mempool_not_used_on_oom,
test_pool_id_in_snapshot) were read in the copy torch_npu keeps "aligned with PyTorch's" tests,
where the store had no newer PyTorch file. Each test is rewritten, not copied: a float32 CUDA
tensor of n elements is ``gpu.empty(4 * n)``; an op that makes a new tensor (``clone``, ``+``)
is one allocation of the result's size, and a temporary dies at the end of its statement, as in
Python; ``torch.cuda.Stream()`` is ``gpu.Stream()``; a memory limit is set with
``set_per_process_memory_fraction`` on a 1 GiB device so that the original's MiB budgets are
exact binary fractions. Numbers are the original's unless a docstring says what was adapted.

Not portable (and why):

- test_tensor_delete_after_allocator_delete, test_mempool_with_allocator's malloc/free counters,
  and every test that builds a CUDAPluggableAllocator (the ``allocator`` argument): pluggable
  allocators are not modelled; the pool behaviour of test_mempool_with_allocator is ported.
- test_graph_concurrent_replay, the data checks of test_graph_two/three_successive (``b.sum()``
  after replay): the simulator has no kernels and no data, so corruption by a shared pool is
  shown through addresses instead (the reuse that causes it).
- test_graph_capture_reclaim_2_streams / _4_streams and other
  ``graph_capture_record_stream_reuse:True`` tests: they rely on the captured graph's node DAG
  (free markers reachable from every terminal); the model has no graph nodes, so a block freed
  during capture with uses on other streams always waits for the end of the capture.
- test_graph_make_graphed_callables*, test_graph_optims*, test_graph_cudnn_dropout,
  test_memory_stats_of_multiple_generators_and_graphs, test_graph_rng_*: need autograd, cuDNN,
  optimizers or CUDA RNG state (the seed/offset holders a real capture allocates).
- test_mempool_multithread's and test_mempool_emptycache_multithread's use of real CUDA contexts
  is kept as Python threads on one simulated device.
"""
import threading

import pytest

import gpumemlab as gml

MiB = 1024 * 1024
kSmallSize = 1048576
kSmallBuffer = 2097152
kLargeBuffer = 20971520
kMinLargeAlloc = 10485760
kRoundLarge = 2097152
CONFS = ["", "expandable_segments:True"]


def floats(gpu, n, stream=None):
    return gpu.empty(4 * n, stream=stream)


def limited(additional_mb, conf=""):
    """_setup_mempool_limited_memory: allow what is reserved now plus ``additional_mb`` MiB."""
    gpu = gml.SimulatedGPU("1GiB", alloc_conf=conf)
    gpu.empty_cache()
    _, all_memory = gpu.mem_get_info()
    gpu.set_per_process_memory_fraction((additional_mb * MiB + gpu.memory_reserved()) / all_memory)
    return gpu


# ----------------------------------------------------------------------------- TestMemPool


def test_mempool_id():
    """test_mempool_id: user-created ids have first value 0; each call makes a new id."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    pool1 = gpu.graph_pool_handle()
    pool2 = gpu.MemPool().id
    assert (pool1[0] == 0) == (pool2[0] == 0)
    assert abs(pool2[1] - pool1[1]) > 0


def test_mempool_public_api():
    """test_mempool_public_api: id is a 2-tuple; use_count 1, 2 inside use_mem_pool, 1 after."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    pool = gpu.MemPool()
    assert isinstance(pool.id, tuple) and len(pool.id) == 2
    assert pool.use_count() == 1
    with gpu.use_mem_pool(pool):
        assert pool.use_count() == 2
    assert pool.use_count() == 1
    gpu.check_invariants()


def test_mempool_multithread():
    """test_mempool_multithread: four threads make four distinct pool ids."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    pool_ids, pools = [], []

    def create_mempool():
        p = gpu.MemPool()
        pools.append(p)
        pool_ids.append(p.id)

    threads = [threading.Thread(target=create_mempool) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(pool_ids)) == 4


@pytest.mark.parametrize("conf", CONFS)
def test_mempool_with_allocator(conf):
    """test_mempool_with_allocator, the pool part (no pluggable allocator): 7 MiB tensors, two
    fit in one 20 MiB segment and a third opens a second; pool.snapshot() counts them."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    pool = gpu.MemPool()
    assert pool.use_count() == 1
    nelem_7mb = 7 * MiB // 4
    with gpu.use_mem_pool(pool):
        out_0 = floats(gpu, nelem_7mb)
        assert pool.use_count() == 2
    assert pool.use_count() == 1
    with gpu.use_mem_pool(pool):
        assert len(pool.snapshot()) == 1
        out_1 = floats(gpu, nelem_7mb)
        assert len(pool.snapshot()) == 1
        out_2 = floats(gpu, nelem_7mb)
        # An expandable segment grows instead: still one (contiguous) segment.
        assert len(pool.snapshot()) == (1 if conf else 2)
    assert len(pool.snapshot()) == (1 if conf else 2)
    del out_0, out_1, out_2
    gpu.check_invariants()
    del pool
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0
    gpu.check_invariants()


def test_mempool_empty_cache():
    """test_mempool_empty_cache: after the pool goes, a cached segment (x's) is still there."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    pool = gpu.MemPool()
    x = floats(gpu, 1024 * 1024)
    with gpu.use_mem_pool(pool):
        y = floats(gpu, 1024 * 1024)
    del y, x, pool
    segments = gpu.snapshot()["segments"]
    assert len(segments) > 0
    assert all(s["segment_pool_id"] == (0, 0) for s in segments)
    gpu.check_invariants()


def test_pool_id_in_snapshot():
    """test_pool_id_in_snapshot: the pool's segment carries segment_pool_id == pool.id and its
    alloc trace entry carries pool_id == pool.id."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    gpu.record_memory_history("all")
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        x = floats(gpu, 64)
    ss = gpu.snapshot()
    assert any(seg["segment_pool_id"] == pool.id for seg in ss["segments"])
    assert any(te.get("pool_id") == pool.id and te["action"] == "alloc"
               for trace in ss["device_traces"] for te in trace)
    del x
    gpu.record_memory_history(None)


def test_nested_mempool():
    """test_nested_mempool: nested contexts route to the innermost pool; 20 MiB tensors get a
    segment each: pool1 2, pool2 2, pool3 1."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    pool1, pool2, pool3 = gpu.MemPool(), gpu.MemPool(), gpu.MemPool()
    data = []
    nelem_1mb = MiB // 4

    def allocate_data():
        data.append(floats(gpu, nelem_1mb * 20))

    with gpu.use_mem_pool(pool1):
        allocate_data()
        with gpu.use_mem_pool(pool2):
            allocate_data()
            with gpu.use_mem_pool(pool3):
                allocate_data()
            allocate_data()
        allocate_data()
    assert len(gpu.memory_snapshot(pool1.id)) == 2
    assert len(gpu.memory_snapshot(pool2.id)) == 2
    assert len(gpu.memory_snapshot(pool3.id)) == 1
    gpu.check_invariants()


def test_mempool_emptycache_multithread():
    """test_mempool_emptycache_multithread: empty_cache() inside use_mem_pool (four threads,
    a pool each) keeps every pool's one cached segment."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")

    def my_function(pool):
        with gpu.use_mem_pool(pool):
            x = floats(gpu, 4)
            del x
            gpu.empty_cache()

    pools = [gpu.MemPool() for _ in range(4)]
    threads = [threading.Thread(target=my_function, args=(p,)) for p in pools]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in pools:
        assert len(p.snapshot()) == 1
    gpu.check_invariants()


def test_mempool_release_cached_blocks_during_diversion():
    """test_mempool_release_cached_blocks_during_diversion: 80 MiB allowed; 60 MiB cached in the
    default pool; a 60 MiB request inside use_mem_pool succeeds because the OOM path still
    empties the default cache (only a graph capture skips that)."""
    gpu = limited(80)
    nelem_1mb = MiB  # int8 elements
    a = gpu.empty(60 * nelem_1mb)
    del a
    pool = gpu.MemPool()
    with gpu.use_mem_pool(pool):
        b = gpu.empty(60 * nelem_1mb)
    assert b.nbytes == 60 * nelem_1mb
    assert gpu.memory_stats()["num_alloc_retries"] == 1
    gpu.check_invariants()
    del b, pool


@pytest.mark.parametrize("label", ["default pool", "user mempool"])
def test_mempool_oom_recovery_releases_cached_blocks(label):
    """test_mempool_oom_recovery_releases_cached_blocks: half the free memory is cached, then
    7/8 of it is requested, in the default pool and inside a user mempool: no OOM."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")

    def align_down_2mb(n):
        return n & ~(2 * MiB - 1)

    free_before = gpu.mem_get_info()[0]
    fill_size = align_down_2mb(free_before // 2)
    filler = gpu.empty(fill_size)
    del filler
    alloc_size = align_down_2mb(free_before - free_before // 8)
    pool = gpu.MemPool() if label == "user mempool" else None
    ctx = gpu.use_mem_pool(pool) if pool is not None else gpu.stream(0)
    with ctx:
        big = gpu.empty(alloc_size)
        del big
    gpu.check_invariants()


def test_mempool_block_free_not_deferred():
    """test_mempool_block_free_not_deferred: a block used on a second stream and freed is reused
    after the events complete, inside a user mempool as outside (no capture deferral)."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    s2 = gpu.Stream()
    nbytes = MiB
    for label in ("default pool", "user mempool"):
        gpu.empty_cache()
        pool = gpu.MemPool() if label == "user mempool" else None
        ctx = gpu.use_mem_pool(pool) if pool is not None else gpu.stream(0)
        with ctx:
            a = gpu.empty(nbytes)
            original_ptr = a.address
            with gpu.stream(s2):
                gpu.record_stream(a, s2)
                _ = gpu.empty(nbytes)  # a + 1 on s2
            del a
            gpu.synchronize()
            b = gpu.empty(nbytes)
            new_ptr = b.address
            del b, _
        assert new_ptr == original_ptr, label
        gpu.check_invariants()


def test_mempool_limited_memory_with_allocator():
    """test_mempool_limited_memory_with_allocator (no pluggable allocator): with 80 MiB allowed,
    a use_on_oom pool lends its cached block to a default-pool request; a pool without
    use_on_oom never does."""
    gpu = limited(80)
    pool_do_not_use = gpu.MemPool()
    pool_use = gpu.MemPool(use_on_oom=True)
    nelem_1mb = MiB // 4
    with gpu.use_mem_pool(pool_do_not_use):
        a = floats(gpu, 40 * nelem_1mb)
    with gpu.use_mem_pool(pool_use):
        b = floats(gpu, 40 * nelem_1mb)
    b_dataptr = b.address
    with pytest.raises(gml.OutOfMemoryError):
        floats(gpu, 40 * nelem_1mb)
    del a, b
    c = floats(gpu, 30 * nelem_1mb)  # served by pool_use's cached 40 MiB block
    c_dataptr = c.address
    with pytest.raises(gml.OutOfMemoryError):
        floats(gpu, 30 * nelem_1mb)  # pool_do_not_use must not be the fallback
    del c
    assert b_dataptr == c_dataptr
    with gpu.use_mem_pool(pool_use):
        e = floats(gpu, 20 * nelem_1mb)
    e_dataptr = e.address
    del e
    assert e_dataptr == c_dataptr
    gpu.check_invariants()
    del pool_use, pool_do_not_use
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0
    gpu.check_invariants()


def test_deleted_mempool_not_used_on_oom():
    """test_deleted_mempool_not_used_on_oom: ten use_on_oom pools made and deleted leave no
    trace; one live pool's 40 MiB then serves two 20 MiB default-pool requests."""
    gpu = limited(48)
    nelem_1mb = MiB // 4
    for _ in range(10):
        pool_use_on_oom = gpu.MemPool(use_on_oom=True)
        with gpu.use_mem_pool(pool_use_on_oom):
            a = floats(gpu, 40 * nelem_1mb)
        del a
        del pool_use_on_oom
    assert len(gpu.allocator.use_on_oom_pools) == 0
    assert len(gpu.allocator.graph_pools) == 0
    new_pool = gpu.MemPool(use_on_oom=True)
    with gpu.use_mem_pool(new_pool):
        a = floats(gpu, 40 * nelem_1mb)
    del a
    b = floats(gpu, 20 * nelem_1mb)
    c = floats(gpu, 20 * nelem_1mb)
    gpu.check_invariants()
    del b, c, new_pool


def test_mempool_no_split():
    """test_mempool_no_split: a no_split pool gives each 4 MiB tensor a whole segment of one
    block, so it has more segments and fewer blocks than a splitting pool."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    pool_split = gpu.MemPool()
    pool_no_split = gpu.MemPool(no_split=True)
    nelem_1mb = MiB // 4
    kept = []
    for _ in range(2):
        with gpu.use_mem_pool(pool_split):
            kept.append(floats(gpu, 4 * nelem_1mb))
        with gpu.use_mem_pool(pool_no_split):
            kept.append(floats(gpu, 4 * nelem_1mb))
    snap_split, snap_no_split = pool_split.snapshot(), pool_no_split.snapshot()
    assert len(snap_no_split) > len(snap_split)
    assert all(len(seg["blocks"]) == 1 for seg in snap_no_split)
    assert (sum(len(s["blocks"]) for s in snap_no_split)
            < sum(len(s["blocks"]) for s in snap_split))
    gpu.check_invariants()


# ----------------------------------------------------------------------------- graphs


def func_with_temps(gpu, t, val):
    """x = t.clone() + val; y = t.clone() + val; return x + y (four temporaries, one result)."""
    n = t.nbytes
    tmp = gpu.empty(n)
    x = gpu.empty(n)
    del tmp
    tmp = gpu.empty(n)
    y = gpu.empty(n)
    del tmp
    return gpu.empty(n)  # x and y die on return


def clone_plus_one(gpu, b):
    """b = b.clone() + 1: the clone is a temporary; the old b dies on rebinding."""
    tmp = gpu.empty(b.nbytes)
    out = gpu.empty(b.nbytes)
    del tmp
    return out


def test_graph_two_successive():
    """test_graph_two_successive, the native-allocator stat check: two graphs that share a pool
    (via pool() or graph_pool_handle()) reserve one small segment (kSmallBuffer) less than two
    graphs with a pool each."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    size = 1000
    s = gpu.Stream()
    reserved_no_sharing = None
    for share_mem in ("Don't share", "via pool()", "via graph_pool_handle()"):
        g0, g1 = gpu.CUDAGraph(), gpu.CUDAGraph()
        a = floats(gpu, size)
        with gpu.stream(s):
            g0_args = ((gpu.graph_pool_handle(),) if share_mem == "via graph_pool_handle()"
                       else ())
            g0.capture_begin(*g0_args)
            b = gpu.empty(a.nbytes)  # a.clone()
            for _ in range(5):
                b = func_with_temps(gpu, b, 1)
            g0.capture_end()
            g1_args = (g0.pool(),) if share_mem == "via pool()" else g0_args
            g1.capture_begin(*g1_args)
            for _ in range(5):
                b = func_with_temps(gpu, b, 1)
            g1.capture_end()
        c = gpu.empty(a.nbytes)
        for _ in range(2):
            c = func_with_temps(gpu, c, 3)
        g0.replay()
        for _ in range(2):
            c = func_with_temps(gpu, c, 3)
        g1.replay()
        for _ in range(2):
            c = func_with_temps(gpu, c, 3)
        reserved = gpu.memory_stats()["reserved_bytes.all.current"]
        if share_mem != "Don't share":
            assert reserved_no_sharing - reserved == kSmallBuffer
        else:
            reserved_no_sharing = reserved
        gpu.check_invariants()
        del a, b, c, g0, g1
        gpu.synchronize()
        gpu.empty_cache()
    assert gpu.memory_reserved() == 0


def test_graph_three_successive():
    """test_graph_three_successive, through addresses: with a shared pool g2's capture reuses
    the memory of c (freed during g1's capture) for f, which is why replaying g0, g2, g1 corrupts
    e; with a pool per graph it cannot."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    size = 1000
    s = gpu.Stream()
    for share_mem in ("Don't share", "via pool()", "via graph_pool_handle()"):
        a = floats(gpu, size)
        g0, g1, g2 = gpu.CUDAGraph(), gpu.CUDAGraph(), gpu.CUDAGraph()
        with gpu.stream(s):
            g0_args = ((gpu.graph_pool_handle(),) if share_mem == "via graph_pool_handle()"
                       else ())
            g0.capture_begin(*g0_args)
            b = gpu.empty(a.nbytes)
            c = gpu.empty(a.nbytes)
            d = gpu.empty(a.nbytes)
            g0.capture_end()
            args = (g0.pool(),) if share_mem == "via pool()" else g0_args
            g1.capture_begin(*args)
            e = gpu.empty(a.nbytes)
            c_address = c.address
            del c
            g1.capture_end()
            g2.capture_begin(*args)
            f = gpu.empty(a.nbytes)
            g2.capture_end()
        for graph in (g0, g1, g2, g0, g2, g1):
            graph.replay()
        del graph
        expect_corruption = share_mem != "Don't share"
        assert (f.address == c_address) == expect_corruption
        gpu.check_invariants()
        del a, b, d, e, f, g0, g1, g2
        gpu.synchronize()
        gpu.empty_cache()
    assert gpu.memory_reserved() == 0


CASES = (
    (512 // 4, 1, kSmallBuffer, kSmallBuffer, "small_pool"),
    (kSmallSize // 4, 2, 2 * kSmallBuffer, kSmallBuffer, "small_pool"),
    ((kSmallSize + 512) // 4, 1, kLargeBuffer, kLargeBuffer, "large_pool"),
    ((kMinLargeAlloc - 512) // 4, 2, 2 * kLargeBuffer, kLargeBuffer, "large_pool"),
    ((kMinLargeAlloc + 512) // 4, 3,
     3 * (kRoundLarge * ((kMinLargeAlloc + 512 + kRoundLarge - 1) // kRoundLarge)),
     kRoundLarge * ((kMinLargeAlloc + 512 + kRoundLarge - 1) // kRoundLarge), "large_pool"),
)


@pytest.mark.parametrize("conf", CONFS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_graph_memory_stats_and_use_result_after_destroy_graph(conf, case):
    """test_graph_memory_stats_and_use_result_after_destroy_graph with its own table: capture
    b = a.clone() and five b = b.clone() + 1 on a side stream; segment, reserved, active and
    active_bytes deltas before/after capture (twice, with an empty_cache between) and after the
    graph is deleted (b alone keeps one segment of the pool). Adapted: a real capture also
    allocates two 512 B RNG seed/offset holders in the small pool, so the original expects 3
    active blocks and +1024 bytes there; the simulator has no RNG state: 1 block, numel * 4.
    With expandable segments the original's adjustments are kept (segment deltas 0; reserved
    2 x 20 MiB for the two 10 MiB cases, and 20 MiB after the graph goes for the last)."""
    numel, d_mallocs, d_bytes, d_bytes_post_del, pool_string = CASES[case]
    expandable = bool(conf)
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    stats_to_check = ("segment.", "reserved_bytes.", "active.", "active_bytes.")
    gpu.empty_cache()
    s = gpu.Stream()
    g = gpu.CUDAGraph()
    with gpu.stream(s):
        a = floats(gpu, numel)
        precapture = gpu.memory_stats()
        g.capture_begin()
        b = gpu.empty(a.nbytes)
        for _ in range(5):
            b = clone_plus_one(gpu, b)
        g.capture_end()
    postcapture = gpu.memory_stats()
    expecteds = (d_mallocs, d_bytes, 1, numel * 4)
    for i in range(2):
        for stat, expected in zip(stats_to_check, expecteds):
            stat = stat + pool_string + ".current"
            if expandable and "segment" in stat:
                expected = 0
            if expandable and "reserved" in stat and case in (3, 4):
                expected = 2 * kLargeBuffer
            assert postcapture[stat] - precapture[stat] == expected, (stat, i)
        g.replay()
        if i == 0:
            gpu.empty_cache()
            postcapture = gpu.memory_stats()
    del g
    gpu.empty_cache()
    postdel = gpu.memory_stats()
    assert not b.freed
    for stat, expected in zip(stats_to_check, (1, d_bytes_post_del, 1, numel * 4)):
        stat = stat + pool_string + ".current"
        if expandable and "segment" in stat:
            expected = 0
        if expandable and "reserved" in stat and case == 3:
            expected = 2 * kLargeBuffer
        if expandable and "reserved" in stat and case == 4:
            expected = kLargeBuffer
        assert postdel[stat] - precapture[stat] == expected, stat
    gpu.check_invariants()
    del a, b
    gpu.empty_cache()
    assert gpu.memory_reserved() == 0
    gpu.check_invariants()


def test_graph_record_stream():
    """test_graph_record_stream: during capture malloc must not process the end-of-life event
    of a block used on another stream (cudaEventQuery would break the capture), and a block
    record_stream'ed and freed during capture is deferred; after the capture, the next malloc
    frees both (b's capture-time stream use needs no event)."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    gpu.empty_cache()
    potential_problem = floats(gpu, 3)
    pp_address = potential_problem.address
    a = floats(gpu, 3)
    s0, s1, s2 = gpu.Stream(), gpu.Stream(), gpu.Stream()
    g = gpu.CUDAGraph()
    gpu.record_stream(potential_problem, s0)
    del potential_problem
    with gpu.stream(s1):
        g.capture_begin()
        b = gpu.empty(a.nbytes)  # a.clone(): must not process potential_problem's event
        pending = [blk for seg in gpu.snapshot()["segments"] for blk in seg["blocks"]
                   if blk["address"] == pp_address]
        assert pending[0]["state"] == "active_pending_free"
        b_address = b.address
        gpu.record_stream(b, s2)
        del b
        g.capture_end()
    states = {blk["address"]: blk["state"] for seg in gpu.snapshot()["segments"]
              for blk in seg["blocks"]}
    assert states[b_address] == "active_pending_free"
    gpu.synchronize()
    c = floats(gpu, 3)  # triggers process_events
    states = {blk["address"]: blk["state"] for seg in gpu.snapshot()["segments"]
              for blk in seg["blocks"]}
    assert states[b_address] == "inactive"
    assert c.address == pp_address  # potential_problem's block came back and was reused
    gpu.check_invariants()


def test_graph_capture_oom():
    """test_graph_capture_oom: an impossible allocation during capture raises the OOM error,
    and the capture ends cleanly (the graph context still calls capture_end)."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    with pytest.raises(RuntimeError, match="out of memory"):
        with gpu.graph(gpu.CUDAGraph()):
            floats(gpu, 2 ** 40)
    assert gpu.allocator.captures_underway == []
    assert not gpu.allocator.is_capture_context()
    gpu.check_invariants()
