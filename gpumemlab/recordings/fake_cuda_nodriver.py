"""Fake CUDA tensors on a CUDA build of torch on a machine with no CUDA driver or device (what
``pip install torch`` gives a Linux laptop): the driver probe, and the CUDA hooks that carry
autograd's backward there.

On such a build torch's own ``FakeGuardImpl`` (``torch._C._ensureCUDADeviceGuardSet``) carries fake
CUDA tensors forward, but autograd's engine, before a backward that touches CUDA, stashes each
device's current stream (``GraphTask::stash_current_streams``) and asks the CUDA hooks
``hasPrimaryContext(i)`` for the fake guard's devices; torch's real hooks check ``i`` against the
real device count, 0, and refuse. ``SOURCE`` registers CUDA hooks that answer "one device, its
context is there" with ``c10::REGISTRY_PREFERRED`` priority: the hooks registry keeps the higher
priority whichever registers first (``c10::Registry::Register``), so torch's own (default
priority) are skipped instead of aborting the process as a second default registration would
("Key already registered with the same priority"). The hooks are created at torch's first
``getCUDAHooks()`` call, during ``import torch``, so the library is loaded before torch, as on a
CPU-only build. torch's own device guard, generators and kernels stay: only the hooks change, and
fake tensors never reach the real generator (they run meta kernels).

``device_count()`` asks the driver library itself (``libcuda.so.1``: ``cuInit``,
``cuDeviceGetCount``) through ctypes, because torch must not be imported before the library.
"""
from __future__ import annotations

import ctypes

__all__ = ["SOURCE", "device_count", "SKIPPED_LINE"]

SOURCE = r"""
#include <ATen/detail/CUDAHooksInterface.h>

namespace at {
// "built, available, one device with its context": what autograd's engine asks before a backward
// on (fake) CUDA tensors; nothing here touches a driver.
struct GmlNoDriverCUDAHooks : public CUDAHooksInterface {
  GmlNoDriverCUDAHooks(CUDAHooksArgs) {}
  void init() const override {}
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  DeviceIndex deviceCount() const override { return 1; }
  int getNumGPUs() const override { return 1; }
  DeviceIndex current_device() const override { return 0; }
  DeviceIndex getCurrentDevice() const override { return 0; }
  void setCurrentDevice(DeviceIndex) const override {}
  DeviceIndex exchangeDevice(DeviceIndex) const override { return 0; }
  DeviceIndex maybeExchangeDevice(DeviceIndex) const override { return 0; }
  void deviceSynchronize(DeviceIndex) const override {}
};
C10_REGISTER_CLASS_WITH_PRIORITY(CUDAHooksRegistry, CUDAHooks, c10::REGISTRY_PREFERRED,
                                 GmlNoDriverCUDAHooks);
}  // namespace at

extern "C" int gml_fake_cuda_built() { return at::detail::getCUDAHooks().hasPrimaryContext(0) ? 1 : 0; }
"""

# what torch's registry prints when its own hooks meet ours (on stderr, during import torch)
SKIPPED_LINE = "Higher priority item already registered, skipping registration of CUDAHooks"


def device_count() -> int:
    """CUDA devices the driver sees: 0 without a driver library, when ``cuInit`` fails (no device,
    a driver too old), or with none visible."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    if cuda.cuInit(0) != 0:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value
