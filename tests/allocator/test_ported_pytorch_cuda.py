"""Ports of PyTorch's own CUDA caching-allocator tests to the simulated GPU.

Source: pytorch/pytorch test/test_cuda.py (classes TestCuda and TestCudaMallocAsync),
test/test_cuda_multigpu.py (the single-device memory-stats test),
c10/test/core/AllocatorConfig_test.cpp (the settings parser) and
test/test_cuda_expandable_segments.py (which reruns TestCuda with ``expandable_segments:True``;
here the relevant ports are parametrized over ``""`` and ``"expandable_segments:True"``).
Each test is rewritten, not copied: a CUDA tensor of ``n`` float32 elements becomes
``gpu.empty(4 * n)``; ``torch.cuda.<fn>`` becomes ``gpu.<fn>``; "another stream" is a stream
number; the device's total memory is the SimulatedGPU's ``total_memory``. The original's
assertions and numbers are kept unless the docstring says what was adapted and why.
test_memory_plots_metadata (``set_memory_metadata``) and test_memory_snapshot_skip_actions
(``record_memory_history(skip_actions=...)``) are ported in tests/allocator/test_ported_pytorch.py.

Not portable (skipped, with the reason):

- test_pinned_memory_with_cudaregister(_multithread), test_host_memory_stats,
  test_pinned_memory_empty_cache, test_pinned_memory_use_background_threads,
  test_cudart_register, test_caching_pinned_memory, TestCachingHostAllocatorCudaGraph:
  pinned host memory is not modelled.
- test_cublas_workspace_explicit_allocation, test_matmul_memory_use: need real cuBLAS/matmul
  kernels to decide how much they allocate.
- test_graph_* / test_cuda_graph_* (incl. test_graph_memory_stats_and_use_result_after_destroy_graph,
  test_memory_stats_of_multiple_generators_and_graphs, test_graph_record_stream,
  test_graph_capture_oom, test_graph_capture_reclaim_*), TestBlockStateAbsorption: CUDA graphs
  and private pools are not modelled.
- TestMemPool (test_mempool_*, test_nested_mempool, test_deleted_mempool_not_used_on_oom,
  test_tensor_delete_after_allocator_delete): MemPool / use_mem_pool / pluggable allocators
  are not modelled.
- test_allocator_backend: the cudaMallocAsync backend is not modelled (it raises).
- test_cachingAllocator_raw_alloc (the disabled half): caching_allocator_enable(False)
  (PYTORCH_NO_CUDA_MEMORY_CACHING) is not modelled; the enabled half is ported.
- test_notifies_oom: OOM observers (_cuda_attach_out_of_memory_observer) are not modelled.
- test_memory_snapshot_with_cpp, test_memory_snapshot_script, test_direct_traceback: C++ and
  TorchScript frames do not exist in the simulator (only Python frames are recorded).
- test_memory_profiler_viz, test_cycles, test_memory_compile_regions,
  TestFXMemoryProfiler: need the profiler / torch.compile / tensor reference cycles.
- AllocatorConfig_test's ``device_specific_option_mb`` key: it exists only through the test's
  REGISTER_ALLOCATOR_CONFIG_PARSE_HOOK (an extension point the model does not have), so the
  port leaves that key out of the first string.
- test_memory_stats_multigpu and the multi-device tests of test/test_cuda_multigpu.py: one
  SimulatedGPU is one device.
- test_out_of_memory's and test_set_per_process_memory_fraction's "kernel still works" checks
  (tensor.fill_): no kernels; replaced by "the device still allocates".
"""
import collections
import json
import random
import sys

import pytest

import gpumemlab as gml

MiB = gml.MiB
CONFS = ["", "expandable_segments:True"]  # test_cuda.py and test_cuda_expandable_segments.py


def floats(gpu, *shape, stream=0):
    """A float32 CUDA tensor of this shape: 4 bytes an element."""
    n = 1
    for d in shape:
        n *= d
    return gpu.empty(4 * n, stream=stream)


# ----------------------------------------------------------------------------- TestCuda


@pytest.mark.parametrize("conf", CONFS)
def test_memory_allocation(conf):
    """TestCuda.test_memory_allocation: caching_allocator_alloc(1) raises memory_allocated and
    caching_allocator_delete brings it back. Adapted: the raw alloc is ``gpu.empty(1)``."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    gpu.empty_cache()
    prev = gpu.memory_allocated()
    mem = gpu.empty(1)
    assert gpu.memory_allocated() > prev
    mem.free()
    assert gpu.memory_allocated() == prev


@pytest.mark.parametrize("conf", CONFS)
def test_memory_stats(conf):
    """TestCuda.test_memory_stats (torch.accelerator API): 256 floats make 1 kB active, freed
    counts it after del, reset_peak_memory_stats restores the maxima. Adapted: randn(256) ->
    gpu.empty(1024)."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    gpu.empty_cache()
    gpu.reset_peak_memory_stats()
    gpu.reset_accumulated_memory_stats()
    prev_allocated = gpu.memory_allocated()
    prev_reserved = gpu.memory_reserved()
    prev_max_allocated = gpu.max_memory_allocated()
    prev_max_reserved = gpu.max_memory_reserved()
    assert prev_allocated == prev_max_allocated
    assert prev_reserved == prev_max_reserved
    prev_active_current = gpu.memory_stats()["active_bytes.all.current"]
    tmp = floats(gpu, 256)
    assert gpu.memory_stats()["active_bytes.all.current"] == 1024 + prev_active_current
    assert gpu.memory_stats()["active_bytes.all.freed"] == 0
    del tmp
    gpu.empty_cache()
    assert gpu.memory_stats()["active_bytes.all.current"] == prev_active_current
    assert gpu.memory_stats()["active_bytes.all.freed"] == 1024
    gpu.reset_peak_memory_stats()
    assert gpu.max_memory_allocated() == prev_max_allocated
    assert gpu.max_memory_reserved() == prev_max_reserved


def test_out_of_memory():
    """TestCuda.test_out_of_memory: an 800,000,000 GiB request goes through malloc and names
    the GPU's capacity; 8,000,000,000 GiB is refused up front (over 1 EB). Adapted: the
    kernel check after the OOM becomes "the device still allocates"."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf="")
    tensor = floats(gpu, 1024)
    with pytest.raises(RuntimeError,
                       match="Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of"):
        gpu.empty(1024 * 1024 * 1024 * 800000000)
    with pytest.raises(RuntimeError, match="Tried to allocate more than 1EB memory"):
        gpu.empty(1024 * 1024 * 1024 * 8000000000)
    assert not tensor.freed
    assert floats(gpu, 1024).size == 4096


@pytest.mark.parametrize("conf", CONFS)
def test_out_of_memory_retry(conf):
    """TestCuda.test_out_of_memory_retry: half the device twice fails, after del a it fits.
    Adapted: on a real GPU the CUDA context holds some memory, so two halves can never both
    fit; here ``other_memory="500MiB"`` plays the CUDA context (without it both halves would
    fit exactly)."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf=conf, other_memory="500MiB")
    gpu.empty_cache()
    total_memory = gpu.total_memory
    size = int(total_memory * 0.5)
    a = gpu.empty(size)
    with pytest.raises(RuntimeError, match="Tried to allocate"):
        gpu.empty(size)
    del a
    b = gpu.empty(size)
    del b
    gpu.empty_cache()
    gpu.reset_peak_memory_stats()
    assert gpu.memory_reserved() == 0
    gpu.check_invariants()


@pytest.mark.parametrize("conf", CONFS)
def test_set_per_process_memory_fraction(conf):
    """TestCuda.test_set_per_process_memory_fraction, with the original's numbers: a small live
    tensor, fraction 0.5, 0.499 of the device (less what is reserved) fits, 0.5 does not.
    Adapted: zeros(1024) -> 4 kB allocation; the kernel check becomes "still allocated"."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    orig = gpu.get_per_process_memory_fraction()
    gpu.reset_peak_memory_stats()
    with pytest.raises(TypeError, match="Invalid type"):
        gpu.set_per_process_memory_fraction(1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        gpu.set_per_process_memory_fraction(-0.1)
    with pytest.raises(ValueError, match="Invalid fraction value"):
        gpu.set_per_process_memory_fraction(2.0)
    tensor = floats(gpu, 1024)
    gpu.empty_cache()
    total_memory = gpu.total_memory
    gpu.set_per_process_memory_fraction(0.5)
    application = int(total_memory * 0.499) - gpu.max_memory_reserved()
    tmp_tensor = gpu.empty(application)
    del tmp_tensor
    gpu.empty_cache()
    application = int(total_memory * 0.5)
    with pytest.raises(RuntimeError, match="out of memory"):
        gpu.empty(application)
    assert not tensor.freed
    gpu.set_per_process_memory_fraction(orig)
    assert gpu.empty(application).nbytes == application


def test_get_per_process_memory_fraction():
    """TestCuda.test_get_per_process_memory_fraction: the fraction set is the fraction read
    (assertEqual's float tolerance), limits 1.0 and 0.0 included. Adapted: torch.rand(3) ->
    random.Random(0)."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf="")
    init_fraction = gpu.get_per_process_memory_fraction()
    gpu.set_per_process_memory_fraction(1.0)
    assert gpu.get_per_process_memory_fraction() == 1.0
    gpu.set_per_process_memory_fraction(0.0)
    assert gpu.get_per_process_memory_fraction() == 0.0
    rng = random.Random(0)
    for _ in range(3):
        val = rng.random()
        gpu.set_per_process_memory_fraction(val)
        assert gpu.get_per_process_memory_fraction() == pytest.approx(val, rel=1.3e-6, abs=1e-5)
    gpu.set_per_process_memory_fraction(init_fraction)
    assert gpu.get_per_process_memory_fraction() == init_fraction


def _block_state(gpu, address):
    for seg in gpu.memory_snapshot():
        for b in seg["blocks"]:
            if b["address"] == address:
                return b["state"]
    return None


@pytest.mark.parametrize("conf", CONFS)
def test_record_stream(conf):
    """TestCuda.test_record_stream: a block allocated on a side stream and recorded on the
    current stream is not reused while that stream may still use it; once the stream is done it
    is reused by the side stream. Adapted: the simulator has no kernels, and (documented
    modelling choice, docs/SOURCE_MAP.md "Events") an event completes by the next malloc; so
    "not reused too soon" is checked as the block being ``active_pending_free`` (off the free
    lists) after the free, and the reuse after ``synchronize()`` is kept as in the original."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    side = 1
    result = floats(gpu, 4)
    tmp = floats(gpu, 4, stream=side)  # t.cuda(non_blocking=True) on the side stream
    ptr = tmp.address
    gpu.record_stream(tmp, 0)  # tmp.record_stream(current_stream)
    del tmp
    assert _block_state(gpu, ptr) == "active_pending_free", "allocation reused too soon"
    gpu.synchronize()
    tmp3 = floats(gpu, 4, stream=side)
    assert tmp3.address == ptr, "allocation not reused"
    del result


@pytest.mark.parametrize("conf", CONFS)
def test_record_stream_on_shifted_view(conf):
    """TestCuda.test_record_stream_on_shifted_view (issue #27366): record_stream through a view
    with an offset still protects the whole block. Adapted: a view is the same Allocation (the
    simulator has no views; record_stream acts on the block, as c10's recordStream does via the
    storage); "a new tensor should not be allocated to the block" is checked as the block being
    active_pending_free after the free (events complete by the next malloc in the model)."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf)
    stream_alloc, stream_record = 1, 2
    base = floats(gpu, 2, stream=stream_alloc)
    view = base
    gpu.record_stream(view, stream_record)
    data_ptr = base.address
    del base, view
    assert _block_state(gpu, data_ptr) == "active_pending_free"
    stats = gpu.memory_stats()
    assert stats["active.all.current"] == 1 and stats["allocation.all.current"] == 0


@pytest.mark.parametrize("conf", CONFS)
def test_caching_allocator_record_stream_oom(conf):
    """TestCuda.test_caching_allocator_record_stream_oom (issue #19219): blocks whose reuse is
    delayed by record_stream are still freed on an out-of-memory retry, so a loop of 100
    160 MB allocations never runs out. Adapted: a 1 GiB device so that the loop really
    exceeds the device many times over."""
    gpu = gml.SimulatedGPU("1GiB", alloc_conf=conf, record_frames=False)
    stream = 1
    y = floats(gpu, 40 * 1024 * 1024, stream=stream)
    for _ in range(100):
        x = floats(gpu, 40 * 1024 * 1024)
        gpu.record_stream(x, stream)
        del x
    gpu.empty_cache()
    assert gpu.memory_reserved() == y.size
    gpu.check_invariants()


# --------------------------------------------------------------------- TestCudaMallocAsync


@pytest.mark.parametrize("conf", CONFS)
def test_memory_snapshot(conf):
    """TestCudaMallocAsync.test_memory_snapshot: 'state' recording with python stacks; x is the
    second block of a segment; its frames point at this file and its address is the block's;
    after empty_cache the last trace entry frees or unmaps a segment. Adapted: torch.rand(...)
    -> gpu.empty(4 * numel); randint -> random.Random(0); _save_segment_usage is not ported."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf=conf)
    try:
        gpu.empty_cache()
        gpu.record_memory_history("state")
        floats(gpu, 2 * 311, 411)  # freed at once: makes x the second block in a segment
        unused = floats(gpu, 310, 410)
        x = floats(gpu, 311, 411)
        tensors = [floats(gpu, 128) for _ in range(1000)]
        rng = random.Random(0)
        while tensors:
            del tensors[rng.randint(0, len(tensors) - 1)]
        floats(gpu, 128 * 5)
        ss = gpu.snapshot()
        found_it = False
        for seg in ss["segments"]:
            assert "frames" in seg
            for b in seg["blocks"]:
                if b["requested_size"] == 311 * 411 * 4:
                    assert "test_ported_pytorch_cuda" in b["frames"][0]["filename"]
                    found_it = True
                    assert x.address == b["address"]
        assert found_it
        del unused
        del x
        gpu.empty_cache()
        ss = gpu.snapshot()
        assert ss["device_traces"][0][-1]["action"] in ("segment_free", "segment_unmap")
    finally:
        gpu.record_memory_history(None)


def test_memory_plots():
    """TestCudaMallocAsync.test_memory_plots: with and without context, trace_plot (also with
    filter_freed), segment_plot work on the snapshot; the function name appears in it iff
    context is recorded; the 64 kB size appears. Adapted: x * x + x * x -> three 64 kB
    temporaries; stacks='all' (C++ frames) is not modelled, so '::rand' never appears."""
    mv = pytest.importorskip("torch.cuda._memory_viz")
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    for context in ("all", "all", None):
        try:
            gpu.empty_cache()
            gpu.record_memory_history("all", context=context)

            def run():
                x = floats(gpu, 128, 128)
                t1, t2 = floats(gpu, 128, 128), floats(gpu, 128, 128)
                out = floats(gpu, 128, 128)
                del t1, t2, out, x

            run()
            record_context = context is not None
            ss = gpu.snapshot()
            mv.trace_plot(ss)
            mv.trace_plot(ss, filter_freed=True)
            mv.segment_plot(ss)
            text = json.dumps(ss)
            assert record_context == ("test_memory_plots" in text)
            assert "::rand" not in text
            assert str(128 * 128 * 4) in text
        finally:
            gpu.record_memory_history(None)


def test_memory_plots_free_stack():
    """TestCudaMallocAsync.test_memory_plots_free_stack: the free's stack is kept only with
    context='all'; the alloc's stack with 'alloc' and 'all' but not 'state'."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    for context in ["alloc", "all", "state"]:
        try:
            gpu.empty_cache()
            gpu.record_memory_history(context=context)
            x = None

            def thealloc():
                nonlocal x
                x = floats(gpu, 3, 4)

            def thefree():
                nonlocal x
                del x

            thealloc()
            thefree()
            ss = json.dumps(gpu.snapshot())
            assert ("thefree" in ss) == (context == "all"), context
            assert ("thealloc" in ss) == (context != "state"), context
        finally:
            gpu.record_memory_history(None)


def test_memory_plots_history_context():
    """TestCudaMallocAsync.test_memory_plots_history_context: switching context off and on
    again while recording keeps the history; only allocations made with context on carry
    their stack."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    try:
        gpu.empty_cache()
        x = None

        def should_capture1():
            nonlocal x
            x = floats(gpu, 4, 4)

        def should_not_capture():
            nonlocal x
            x = floats(gpu, 3, 4)

        def should_capture2():
            nonlocal x
            x = floats(gpu, 4, 4)

        gpu.record_memory_history(context="all")
        should_capture1()
        gpu.record_memory_history(context=None)
        should_not_capture()
        gpu.record_memory_history(context="all")
        should_capture2()
        ss = json.dumps(gpu.snapshot())
        assert "should_capture1" in ss
        assert "should_not_capture" not in ss
        assert "should_capture2" in ss
    finally:
        gpu.record_memory_history(None)


def test_memory_plots_free_segment_stack():
    """TestCudaMallocAsync.test_memory_plots_free_segment_stack: empty_cache's stack is on the
    segment free only with context='all'. Adapted: in PyTorch the innermost Python frame is
    torch.cuda.memory.empty_cache itself; the simulator records only frames outside gpumemlab,
    so a local function named ``empty_cache`` plays that frame."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")

    def empty_cache():
        gpu.empty_cache()

    for context in ["alloc", "all", "state"]:
        try:
            gpu.empty_cache()
            gpu.record_memory_history(context=context)
            x = floats(gpu, 3, 4)
            del x
            empty_cache()
            ss = json.dumps(gpu.snapshot())
            assert ("empty_cache" in ss) == (context == "all"), context
        finally:
            gpu.record_memory_history(None)


def test_cpp_memory_snapshot_pickle():
    """TestCudaMallocAsync.test_cpp_memory_snapshot_pickle: recording through the C++ API
    (enabled, record_context=ctx, 10 entries, trace context=ctx): the live block is found, has
    Python frames iff ctx, and the last trace entry is its alloc. Adapted: the C++ extension and
    TorchScript function are replaced by gpu.record_memory_history(context='alloc' if ctx else
    None, max_entries=10) and a plain function; C++/script frames are not modelled."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf="")
    for ctx in (False, True):
        try:
            gpu.record_memory_history("all", context="alloc" if ctx else None, max_entries=10)

            def the_script_fn():
                return floats(gpu, 311, 411)

            def run():
                t = the_script_fn()
                return gpu.snapshot(), t

            mem, t = run()
            found = False
            for s in mem["segments"]:
                for b in s["blocks"]:
                    if b["state"] == "active_allocated" and b["requested_size"] == 311 * 411 * 4:
                        frame_text = str(b["frames"])
                        assert ("the_script_fn" in frame_text) == ctx
                        assert ("test_ported_pytorch_cuda" in frame_text) == ctx
                        found = True
            last_action = mem["device_traces"][0][-1]
            assert last_action["action"] == "alloc"
            assert last_action["size"] == 311 * 411 * 4
            assert found
            del t
        finally:
            gpu.record_memory_history(None)


def _fraction_for_120_mb(gpu):
    """The two expandable tests' set-up: empty the cache, then the fraction that allows 120 MB
    more than is reserved. Returns (fraction, device total, allowed bytes)."""
    gpu.empty_cache()
    _, all_memory = gpu.mem_get_info()
    total_allowed = 120 * 1024 * 1024 + gpu.memory_reserved()
    return total_allowed / all_memory, all_memory, total_allowed


def _alloc_mb(gpu):
    """``torch.ones(n * MB, dtype=torch.int8, device="cuda")`` of the originals."""
    return lambda n: gpu.empty(n * 1024 * 1024)


@pytest.mark.parametrize("conf", CONFS)
def test_max_split_expandable(conf):
    """TestCudaMallocAsync.test_max_split_expandable: a 120 MB fraction, settings switched between
    allocations, OOM on the fourth 40 MB, then 120 MB after freeing (release_cached_blocks
    with expandable blocks in the free list). Adapted: torch.ones(n MB, int8) -> gpu.empty."""
    gpu = gml.SimulatedGPU("80GiB", alloc_conf=conf, record_frames=False)
    orig = gpu.get_per_process_memory_fraction()
    try:
        fraction_allowed, all_memory, total_allowed = _fraction_for_120_mb(gpu)
        assert int(round(fraction_allowed * all_memory)) == total_allowed
        gpu.set_per_process_memory_fraction(fraction_allowed)
        alloc = _alloc_mb(gpu)

        gpu.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
        a = alloc(40)
        gpu.set_allocator_settings("expandable_segments:True,max_split_size_mb:40")
        b = alloc(40)
        gpu.set_allocator_settings("expandable_segments:False,max_split_size_mb:40")
        c = alloc(40)
        with pytest.raises(gml.OutOfMemoryError):
            alloc(40)
        del a, b, c
        alloc(120)
        gpu.check_invariants()
    finally:
        gpu.set_per_process_memory_fraction(orig)


@pytest.mark.parametrize("conf", CONFS)
def test_garbage_collect_expandable(conf):
    """TestCudaMallocAsync.test_garbage_collect_expandable: with a 120 MB fraction and
    garbage_collection_threshold 0.5, an 80 MB allocation after freeing a normal and an
    expandable 40 MB block runs GC with an expandable block in the free list."""
    gpu = gml.SimulatedGPU("80GiB", alloc_conf=conf, record_frames=False)
    orig = gpu.get_per_process_memory_fraction()
    try:
        fraction_allowed, all_memory, total_allowed = _fraction_for_120_mb(gpu)
        assert fraction_allowed * all_memory == total_allowed
        gpu.set_per_process_memory_fraction(fraction_allowed)
        alloc = _alloc_mb(gpu)

        gpu.set_allocator_settings("expandable_segments:False,garbage_collection_threshold:0.5")
        a = alloc(40)
        gpu.set_allocator_settings("expandable_segments:True,garbage_collection_threshold:0.5")
        b = alloc(40)
        del a, b
        alloc(80)
        gpu.check_invariants()
    finally:
        gpu.set_per_process_memory_fraction(orig)


def _power2_div(size, div_factor):
    """test_allocator_settings' helper: the size after roundup_power2_divisions:div_factor."""
    pow2 = 1
    while pow2 < size:
        pow2 *= 2
    if pow2 == size:
        return pow2
    step = pow2 / 2 / div_factor
    ret = pow2 / 2
    while ret < size:
        ret += step
    return ret


@pytest.mark.parametrize("conf", CONFS)
def test_allocator_settings(conf):
    """TestCudaMallocAsync.test_allocator_settings (newest version: key active_bytes.all.allocated):
    roundup_power2_divisions single value and list syntax, a later setting string resets
    the divisions, release_lock_on_cudamalloc, and the bad strings (ValueError)."""
    gpu = gml.SimulatedGPU("80GiB", alloc_conf=conf, record_frames=False)
    gpu.empty_cache()
    key_allocated = "active_bytes.all.allocated"
    key_requested = "requested_bytes.all.allocated"
    nelems = 21 * 1024 * 1024
    nbytes = 4 * nelems
    nelems_big = 100 * 1024 * 1024
    nbytes_big = 4 * nelems_big

    start_mem = gpu.memory_stats()[key_allocated]
    gpu.set_allocator_settings("")
    x = floats(gpu, nelems)
    reg_mem = gpu.memory_stats()[key_allocated]
    start_requested = gpu.memory_stats()[key_requested]
    gpu.set_allocator_settings("roundup_power2_divisions:4")
    y = floats(gpu, nelems)
    pow2_div4_mem = gpu.memory_stats()[key_allocated]
    current_requested = gpu.memory_stats()[key_requested]
    assert reg_mem - start_mem == nbytes
    assert pow2_div4_mem - reg_mem == _power2_div(nbytes, 4)
    assert current_requested - start_requested == nbytes

    gpu.set_allocator_settings("garbage_collection_threshold:0.5")
    gpu.set_allocator_settings("garbage_collection_threshold:0.5,max_split_size_mb:40")
    gpu.empty_cache()
    start_mem = gpu.memory_stats()[key_allocated]
    z = floats(gpu, nelems)
    reg_mem = gpu.memory_stats()[key_allocated]
    assert reg_mem - start_mem == nbytes

    gpu.empty_cache()
    gpu.set_allocator_settings(
        "garbage_collection_threshold:0.5,roundup_power2_divisions:[64:8,128:2,256:2,512:2,1024:1,>:1]")
    start_mem = gpu.memory_stats()[key_allocated]
    w = floats(gpu, nelems)
    assert gpu.memory_stats()[key_allocated] - start_mem == _power2_div(nbytes, 8)

    gpu.empty_cache()
    start_mem = gpu.memory_stats()[key_allocated]
    v = floats(gpu, nelems_big)
    assert gpu.memory_stats()[key_allocated] - start_mem == _power2_div(nbytes_big, 2)

    gpu.empty_cache()
    gpu.set_allocator_settings("release_lock_on_cudamalloc:True")
    start_mem = gpu.memory_stats()[key_allocated]
    w = floats(gpu, nelems)
    assert gpu.memory_stats()[key_allocated] - start_mem == nbytes

    for bad in ("foo:1,bar:2", "garbage_collection_threshold:1.2", "max_split_size_mb:2",
                "release_lock_on_cudamalloc:none", "pinned_use_cuda_host_register:none",
                "pinned_num_register_threads:none", "pinned_num_register_threads:1024"):
        with pytest.raises(ValueError):
            gpu.set_allocator_settings(bad)
    del x, y, z, w, v


@pytest.mark.parametrize("via_env", [False, True])
def test_allocator_memory_fraction_setting(via_env, monkeypatch):
    """TestCudaMallocAsync.test_allocator_memory_fraction_setting: per_process_memory_fraction in
    PYTORCH_CUDA_ALLOC_CONF is what get_per_process_memory_fraction reports (printed "0.0",
    "0.5", "1.0"); -0.1 and 1.1 fail with "per_process_memory_fraction is invalid". Adapted:
    the subprocess becomes a new SimulatedGPU reading the string (or the environment)."""
    def run_test(value):
        conf = f"per_process_memory_fraction:{value}"
        if via_env:
            monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", conf)
            monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
            gpu = gml.SimulatedGPU("24GiB")
        else:
            gpu = gml.SimulatedGPU("24GiB", alloc_conf=conf)
        return str(gpu.get_per_process_memory_fraction())

    assert run_test(0.0) == "0.0"
    assert run_test(0.5) == "0.5"
    assert run_test(1.0) == "1.0"
    for bad in (-0.1, 1.1):
        with pytest.raises((RuntimeError, ValueError), match="per_process_memory_fraction is invalid"):
            run_test(bad)


def test_cachingAllocator_raw_alloc():
    """TestCudaMallocAsync.test_cachingAllocator_raw_alloc, enabled half: a 1 MB raw_alloc adds
    exactly 1 MB to requested_bytes.all.allocated. Not ported: the disabled caching allocator
    (caching_allocator_enable(False)), which the model does not have."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf="")
    gpu.empty_cache()
    gpu.reset_accumulated_memory_stats()
    raw_alloc_size = 1024 * 1024
    start = gpu.memory_stats()["requested_bytes.all.allocated"]
    mem = gpu.empty(raw_alloc_size, stream=0)
    finish = gpu.memory_stats()["requested_bytes.all.allocated"]
    mem.free()
    assert finish - start == raw_alloc_size


@pytest.mark.parametrize("max_split_size_mb_setting", [False, True])
@pytest.mark.parametrize("conf", CONFS)
def test_raises_oom(max_split_size_mb_setting, conf):
    """TestCudaMallocAsync.test_raises_oom: 1024**4 floats (4 TiB) raise OutOfMemoryError, with
    and without max_split_size_mb:1024 (which makes the free-block search go further)."""
    gpu = gml.SimulatedGPU("80GiB", alloc_conf=conf)
    if max_split_size_mb_setting:
        gpu.set_allocator_settings("max_split_size_mb:1024")
        gpu.empty_cache()
    with pytest.raises(gml.OutOfMemoryError):
        floats(gpu, 1024 * 1024 * 1024 * 1024)
    assert gpu.memory_stats()["num_ooms"] == 1


@pytest.mark.parametrize("conf", CONFS)
def test_allocator_fuzz(conf):
    """TestCudaMallocAsync.test_allocator_fuzz: 10,000 random allocs (2-20 MB of int32), frees
    and empty_caches, keeping under ~100 MB live. Adapted: the value check of each freed tensor
    becomes "live allocations never overlap and are never freed early", plus the model's
    invariants; the global random module -> random.Random(123)."""
    gpu = gml.SimulatedGPU("8GiB", alloc_conf=conf, record_history=False, record_frames=False)
    rng = random.Random(123)
    n_steps = 10000
    mem = []
    total = 0
    c = 0

    def alloc():
        nonlocal total, c
        b = rng.randrange(2 * 1024 * 1024 // 4, 20 * 1024 * 1024 // 4)
        mem.append((c, gpu.empty(4 * b)))
        c += 1
        total += b

    def free():
        nonlocal total
        idx = rng.randrange(0, len(mem))
        _, x = mem.pop(idx)
        assert not x.freed
        total -= x.nbytes // 4
        x.free()

    def check_no_overlap():
        spans = sorted((x.address, x.address + x.size) for _, x in mem)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert end <= start

    choices = [alloc, free, gpu.empty_cache]
    for step in range(n_steps):
        while total >= 1024 * 1024 * 1024 / (4 * 10):
            free()
        (action,) = rng.choices(choices, weights=[1, 1 if mem else 0, 0.1])
        action()
        if step % 500 == 0:
            check_no_overlap()
    check_no_overlap()
    gpu.check_invariants()
    assert gpu.memory_allocated() == sum(x.size for _, x in mem)


def test_device_memory_used():
    """TestCudaMallocAsync.test_device_memory_used: after empty_cache, a live 512 MB tensor
    shows as device memory in use, to an order of magnitude. Adapted: NVML's used memory ->
    total - free from mem_get_info (cudaMemGetInfo)."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf="")

    def device_memory_used():
        free, total = gpu.mem_get_info()
        return total - free

    gpu.synchronize()
    gpu.empty_cache()
    a = device_memory_used()
    num_bytes = 512 * 1024 ** 2
    _ = gpu.empty(num_bytes)
    gpu.synchronize()
    gpu.empty_cache()
    b = device_memory_used()
    mem_bytes = b - a
    assert num_bytes // 32 <= mem_bytes <= num_bytes * 32


# ---------------------------------------------------- c10/test/core/AllocatorConfig_test.cpp


def test_allocator_config_test():
    """AllocatorConfigTest.allocator_config_test: each settings string is stored as given and
    parsed; keys not mentioned are reset (max_split_size, roundup divisions, GC threshold) or
    kept (expandable_segments); the list syntax leaves unlisted intervals at 0 and gives the
    first entry's value to the intervals below it. Adapted: read through the SimulatedGPU's
    allocator config; ``device_specific_option_mb`` (a key registered by the test's parse hook)
    is left out."""
    kmb = 1024 * 1024
    gpu = gml.SimulatedGPU("80GiB", alloc_conf="")
    cfg = lambda: gpu.allocator.config  # noqa: E731

    env = ("max_split_size_mb:40,"
           "max_non_split_rounding_mb:30,"
           "garbage_collection_threshold:0.5,"
           "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1],"
           "expandable_segments:True,"
           "pinned_use_background_threads:True")
    gpu.set_allocator_settings(env)
    assert gpu.allocator_settings() == env
    assert cfg().max_split_size == 40 * kmb
    assert cfg().max_non_split_rounding_size == 30 * kmb
    assert cfg().garbage_collection_threshold == 0.5
    for mb, div in ((32, 8), (64, 8), (128, 2), (256, 4), (512, 2), (1024, 4), (2048, 1),
                    (4096, 1), (8192, 1)):
        assert cfg().roundup_power2_divisions(mb * kmb) == div, mb
    assert cfg().expandable_segments is True
    assert cfg().pinned_use_background_threads is True

    env = "max_split_size_mb:20,max_non_split_rounding_mb:40,garbage_collection_threshold:0.8"
    gpu.set_allocator_settings(env)
    assert gpu.allocator_settings() == env
    assert cfg().max_split_size == 20 * kmb
    assert cfg().max_non_split_rounding_size == 40 * kmb
    assert cfg().garbage_collection_threshold == 0.8

    env = "roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]"
    gpu.set_allocator_settings(env)
    assert gpu.allocator_settings() == env
    for mb, div in ((64, 8), (128, 8), (256, 16), (512, 1), (1024, 0), (2048, 8), (4096, 2)):
        assert cfg().roundup_power2_divisions(mb * kmb) == div, mb

    env = "roundup_power2_divisions:4"
    gpu.set_allocator_settings(env)
    assert gpu.allocator_settings() == env
    for mb in (64, 256, 2048):
        assert cfg().roundup_power2_divisions(mb * kmb) == 4, mb

    env = "expandable_segments:False,"
    gpu.set_allocator_settings(env)
    assert gpu.allocator_settings() == env
    assert cfg().expandable_segments is False

    env = "pinned_use_background_threads:False"
    gpu.set_allocator_settings(env)
    assert gpu.allocator_settings() == env
    assert cfg().pinned_use_background_threads is False


# ------------------------------------------------------------- test_cuda_multigpu.py


def _check_memory_stat_consistency(gpu):
    """TestCudaMultiGPU._check_memory_stat_consistency: the snapshot's segments and blocks add up
    to memory_stats' current values (expandable segments do not count as segments, nor their
    free blocks as inactive splits)."""
    expected = collections.defaultdict(int)
    for segment in gpu.memory_snapshot():
        expandable = segment["is_expandable"]
        pool_str = segment["segment_type"] + "_pool"
        if not expandable:
            expected["segment.all.current"] += 1
            expected["segment." + pool_str + ".current"] += 1
        for stat, field in (("allocated_bytes", "allocated_size"), ("reserved_bytes", "total_size"),
                            ("active_bytes", "active_size"), ("requested_bytes", "requested_size")):
            expected[stat + ".all.current"] += segment[field]
            expected[stat + "." + pool_str + ".current"] += segment[field]
        sum_requested = 0
        is_split = len(segment["blocks"]) > 1
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                expected["allocation.all.current"] += 1
                expected["allocation." + pool_str + ".current"] += 1
            if block["state"].startswith("active_"):
                sum_requested += block["requested_size"]
                expected["active.all.current"] += 1
                expected["active." + pool_str + ".current"] += 1
            if block["state"] == "inactive" and is_split and not expandable:
                expected["inactive_split.all.current"] += 1
                expected["inactive_split." + pool_str + ".current"] += 1
                expected["inactive_split_bytes.all.current"] += block["size"]
                expected["inactive_split_bytes." + pool_str + ".current"] += block["size"]
        assert sum_requested == segment["requested_size"]
    stats = gpu.memory_stats()
    for k, v in expected.items():
        assert stats[k] == v, k


def _memory_stats_generator(gpu, n=35):
    """TestCudaMultiGPU._test_memory_stats_generator, rewritten: allocated/reserved and their
    peaks move the right way through small, large, empty, permuted and freed tensors;
    empty_cache syncs all streams once and never raises max reserved; reset_peak sets the
    peaks to the current values."""
    m0 = gpu.memory_allocated()
    last_m = [gpu.memory_allocated()]
    max_m = [gpu.max_memory_allocated()]
    last_r = [gpu.memory_reserved()]
    max_r = [gpu.max_memory_reserved()]

    def alloc(*size):
        return floats(gpu, *size)

    def assert_change(comp=1, empty_cache=False, reset_peak=False):
        new_m = gpu.memory_allocated()
        new_max_m = gpu.max_memory_allocated()
        if comp > 0:
            assert new_m > last_m[0]
        elif comp < 0:
            assert new_m < last_m[0]
        else:
            assert new_m == last_m[0]
        assert new_m <= new_max_m
        assert new_max_m >= max_m[0]
        last_m[0] = new_m
        max_m[0] = new_max_m

        new_r = gpu.memory_reserved()
        new_max_r = gpu.max_memory_reserved()
        assert new_r <= new_max_r
        assert new_max_r >= max_r[0]
        last_r[0] = new_r
        max_r[0] = new_max_r

        if empty_cache:
            stats = gpu.memory_stats()
            num_sync_1 = stats.get("num_sync_all_streams", -1)
            assert num_sync_1 >= 0
            num_alloc_1 = stats.get("num_device_alloc", -1)
            assert num_alloc_1 >= (0 if new_m == 0 else 1)
            num_free_1 = stats.get("num_device_free", -1)
            assert num_free_1 >= 0
            gpu.empty_cache()
            stats = gpu.memory_stats()
            assert stats.get("num_sync_all_streams", -1) == num_sync_1 + 1
            assert stats.get("num_device_alloc", -1) >= num_alloc_1
            assert stats.get("num_device_free", -1) >= num_free_1
            new_r = gpu.memory_reserved()
            new_max_r = gpu.max_memory_reserved()
            assert new_r <= last_r[0]
            assert new_r <= new_max_r
            assert new_max_r == max_r[0]
            last_r[0] = new_r

        if reset_peak:
            gpu.reset_peak_memory_stats()
            assert gpu.memory_allocated() == last_m[0]
            assert gpu.max_memory_allocated() == last_m[0]
            max_m[0] = last_m[0]
            assert gpu.memory_reserved() == last_r[0]
            assert gpu.max_memory_reserved() == last_r[0]
            max_r[0] = last_r[0]

    assert_change(0)
    assert_change(0, reset_peak=True)
    assert_change(0, empty_cache=True)
    assert_change(0, reset_peak=True)
    assert_change(0)
    yield

    tensors1 = [alloc(1), alloc(10, 20), alloc(200, 300, 2000)]
    m1 = gpu.memory_allocated()
    assert_change(1)
    yield

    tensors2 = []
    for i in range(1, n // 2 + 1):  # small ones
        tensors2.append(alloc(i, i * 4))
        assert_change(1)
        yield
    for i in range(5, n // 2 + 5):  # large ones
        tensors2.append(alloc(i, i * 7, i * 9, i * 11))
        assert_change(1, reset_peak=(i % 2 == 0))
        yield

    tensors2.append(alloc(0, 0, 0))
    assert_change(0)
    yield

    permute = []
    order = list(range(len(tensors2)))
    random.Random(0).shuffle(order)  # torch.randperm
    for i in order:
        permute.append(tensors2[i])
        assert_change(0)
        yield

    del tensors2
    assert_change(0)
    yield
    tensors2 = permute
    assert_change(0)
    yield
    del permute
    assert_change(0, reset_peak=True)
    yield

    for i in range(n // 2):
        x = tensors2[i].nbytes // 4
        del tensors2[i]
        assert_change(-x)  # 0 when tensors2[i] was empty
        yield

    for i in range(2, int(2 * n / 3) + 2):
        tensors2.append(alloc(i, i * 3, i * 8))
        assert_change(1)
        yield

    del tensors2
    assert_change(-1, reset_peak=True)
    assert_change(0)
    assert gpu.memory_allocated() == m1
    yield True

    del tensors1
    assert_change(-1, reset_peak=True)
    assert gpu.memory_allocated() == m0

    assert_change(0, empty_cache=True)
    assert_change(0, reset_peak=True)


@pytest.mark.parametrize("conf", CONFS)
def test_memory_stats_multigpu_file_single_device(conf):
    """TestCudaMultiGPU.test_memory_stats (test_cuda_multigpu.py; it runs on one device): after
    every step of the stats generator, memory_stats agree with the snapshot. Adapted:
    torch.cuda.FloatTensor(*size) -> gpu.empty(4 * numel); torch.randperm -> a seeded shuffle."""
    gpu = gml.SimulatedGPU("24GiB", alloc_conf=conf, record_frames=False)
    gpu.empty_cache()
    steps = 0
    for _ in _memory_stats_generator(gpu):
        _check_memory_stat_consistency(gpu)
        steps += 1
    assert steps > 50
    gpu.check_invariants()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
