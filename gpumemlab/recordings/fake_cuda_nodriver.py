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

__all__ = ["SOURCE", "SDP_CHOICE", "HOOKS_MEMBERS", "device_count", "SKIPPED_LINE"]

# shared with the CPU-only build's library (fake_cuda.SOURCE): gml_sdp_choice, in an anonymous namespace
SDP_CHOICE = r"""
// scaled_dot_product_attention picks its CUDA kernel through a dispatch stub that a CPU-only torch
// leaves empty (it would fall back to the math path, scores materialized). This picks as a card of
// sm80 or newer does for the common cases, honouring torch.backends.cuda's enable_*_sdp switches:
// flash (fp16/bf16, no mask, head dim a multiple of 8 up to 256), else memory-efficient (head dim
// a multiple of 8), else math. Values of sdp::SDPBackend: math 0, flash 1, efficient 2.
namespace {
int64_t gml_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const std::optional<at::Tensor>& mask, double, bool,
                       std::optional<double>, bool) {
  auto& ctx = at::globalContext();
  bool half = q.scalar_type() == at::kHalf || q.scalar_type() == at::kBFloat16;
  int64_t d = q.dim() == 4 ? q.size(-1) : -1;
  bool same = k.dim() == 4 && v.dim() == 4 && k.size(-1) == d && v.size(-1) == d;
  if (ctx.userEnabledFlashSDP() && half && !mask.has_value() && same && d % 8 == 0 && d <= 256)
    return 1;
  if (ctx.userEnabledMemEfficientSDP() && d > 0 && d % 8 == 0 && k.dim() == 4 && v.dim() == 4)
    return 2;
  return 0;
}
}  // namespace
"""

# The CUDA hooks' answers, "built, available, one device with its context, device 0", shared with
# the CPU-only build's library (fake_cuda.SOURCE); each library names its own struct.
HOOKS_MEMBERS = r"""
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
""".lstrip("\n")

SOURCE = r"""
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/Context.h>
#include <ATen/native/transformers/attention.h>
""" + SDP_CHOICE + r"""

namespace at {
// "built, available, one device with its context": what autograd's engine asks before a backward
// on (fake) CUDA tensors; nothing here touches a driver.
struct GmlNoDriverCUDAHooks : public CUDAHooksInterface {
  GmlNoDriverCUDAHooks(CUDAHooksArgs) {}
""" + HOOKS_MEMBERS + r"""};
C10_REGISTER_CLASS_WITH_PRIORITY(CUDAHooksRegistry, CUDAHooks, c10::REGISTRY_PREFERRED,
                                 GmlNoDriverCUDAHooks);
}  // namespace at

extern "C" int gml_fake_cuda_built() { return at::detail::getCUDAHooks().hasPrimaryContext(0) ? 1 : 0; }

// torch's own CUDA choice (registered when libtorch_cuda loads, after this library) reads the
// real card's properties: called after import torch, this puts the kit's in its place
extern "C" void gml_take_sdp_choice() {
  at::native::_fused_sdp_choice_stub.set_cuda_dispatch_ptr(&gml_sdp_choice);
}
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
