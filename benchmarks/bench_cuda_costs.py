"""What the driver calls behind the caching allocator cost on this machine's GPU: the figures
lesson 01 quotes and docs/DEVICES.md records. Needs CUDA; without it, one line and exit 2.

    python benchmarks/bench_cuda_costs.py [--json FILE] [--repeats 15]

Each figure is the median (with min and max) of ``--repeats`` timed repeats after a warm-up:

* ``malloc_free``: cudaMalloc and cudaFree latency by size (512 B to 1 GiB), called through the
  CUDA runtime with ctypes (the calls c10's ``alloc_block`` and ``release_block`` make), with an
  idle device;
* ``free_sync``: cudaFree while a queue of kernels is running: cudaFree waits for the device to
  finish (an implicit device synchronisation), so the CPU loses its run-ahead. Measured as the
  time cudaFree takes after enqueueing ``torch.cuda._sleep`` kernels of known length, against the
  time to enqueue them;
* ``empty_cache``: ``torch.cuda.empty_cache()`` with N cached 20 MiB segments (N = 1, 10, 100);
* ``expandable``: with ``expandable_segments:True`` (in a child process: PyTorch reads the setting
  once), the cost per page of mapping (a tensor that grows the segment) and unmapping
  (``empty_cache``), for the small pool's 2 MiB pages and the large pool's 20 MiB pages.

The JSON carries the GPU's name, the driver and runtime versions and torch's version.
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import time

MiB = 1024 * 1024
SIZES = [512, 64 * 1024, 2 * MiB, 20 * MiB, 256 * MiB, 1024 * MiB]


def _stats(samples_s):
    us = sorted(1e6 * s for s in samples_s)
    return {"median_us": round(statistics.median(us), 2), "min_us": round(us[0], 2),
            "max_us": round(us[-1], 2), "repeats": len(us)}


def _cudart():
    """The CUDA runtime torch loaded (its pip wheel's, else the system's)."""
    import torch  # noqa: F401  (loads libcudart first)
    candidates = []
    for path in sys.path:
        candidates += glob.glob(os.path.join(path, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
    candidates += ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("no libcudart found next to torch or on the library path")


def malloc_free(rt, repeats):
    out = {}
    ptr = ctypes.c_void_p()
    for size in SIZES:
        mallocs, frees = [], []
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            err = rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size))
            t1 = time.perf_counter()
            if err:
                raise RuntimeError(f"cudaMalloc({size}) returned error {err}")
            rt.cudaFree(ptr)
            t2 = time.perf_counter()
            if i:                      # the first is the warm-up
                mallocs.append(t1 - t0)
                frees.append(t2 - t1)
        out[str(size)] = {"cudaMalloc": _stats(mallocs), "cudaFree": _stats(frees)}
    return out


def free_sync(rt, repeats, torch):
    ptr = ctypes.c_void_p()
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1000 * 0.002)  # ~2 ms a kernel
    enqueue, freeing = [], []
    for i in range(repeats + 1):
        rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(20 * MiB))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            torch.cuda._sleep(cycles)
        t1 = time.perf_counter()
        rt.cudaFree(ptr)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        if i:
            enqueue.append(t1 - t0)
            freeing.append(t2 - t1)
    return {"kernels": 10, "kernel_cycles": cycles, "enqueue": _stats(enqueue),
            "cudaFree_behind_queue": _stats(freeing)}


def empty_cache(torch, repeats):
    out = {}
    for n in (1, 10, 100):
        times = []
        for _ in range(max(3, repeats // 3)):
            xs = [torch.empty(20 * MiB, dtype=torch.uint8, device="cuda") for _ in range(n)]
            del xs
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.cuda.empty_cache()
            times.append(time.perf_counter() - t0)
        out[str(n)] = _stats(times)
    return out


def expandable_child(repeats):
    import torch
    out = {}
    for label, size, page in (("small_pool_2MiB_pages", 512 * 1024, 2 * MiB),
                              ("large_pool_20MiB_pages", 20 * MiB, 20 * MiB)):
        maps, unmaps = [], []
        pages = 8
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            xs = [torch.empty(size, dtype=torch.uint8, device="cuda")
                  for _ in range(pages * page // size)]
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            del xs
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            maps.append((t1 - t0) / pages)
            unmaps.append((t2 - t1) / pages)
        out[label] = {"pages": pages, "map_per_page": _stats(maps), "unmap_per_page": _stats(unmaps)}
    print(json.dumps(out))


def expandable(repeats):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    r = subprocess.run([sys.executable, __file__, "--expandable-child", "--repeats", str(repeats)],
                       env=env, capture_output=True, text=True, timeout=120)
    if r.returncode:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the figures to this file too")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--expandable-child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("bench_cuda_costs: torch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("bench_cuda_costs: no CUDA GPU here (torch.cuda.is_available() is False): "
              "nothing to measure", file=sys.stderr)
        return 2
    if args.expandable_child:
        expandable_child(args.repeats)
        return 0
    rt = _cudart()
    driver, runtime = ctypes.c_int(), ctypes.c_int()
    rt.cudaDriverGetVersion(ctypes.byref(driver))
    rt.cudaRuntimeGetVersion(ctypes.byref(runtime))
    torch.cuda.init()
    report = {"gpu": torch.cuda.get_device_name(0), "driver_version": driver.value,
              "runtime_version": runtime.value, "torch": torch.__version__,
              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, fn in (("malloc_free", lambda: malloc_free(rt, args.repeats)),
                     ("free_sync", lambda: free_sync(rt, args.repeats, torch)),
                     ("empty_cache", lambda: empty_cache(torch, args.repeats)),
                     ("expandable", lambda: expandable(args.repeats))):
        try:
            report[name] = fn()
        except Exception as exc:     # one failed part must not lose the others
            report[name] = {"error": f"{type(exc).__name__}: {exc}"}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
