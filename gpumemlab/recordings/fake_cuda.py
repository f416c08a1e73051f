"""Fake CUDA tensors on a torch built without CUDA: a tiny C++ library that makes a CPU-only torch
accept ``device="cuda"`` fake tensors all the way through autograd, autocast and optimizers.

A CPU-only torch refuses CUDA tensors even when they hold no memory (``FakeTensorMode``): autograd's
engine asks for the CUDA device guard (``c10::impl::getDeviceGuardImpl``; "PyTorch is not linked
with support for cuda devices") and for the accelerator (``at::accelerator::getAccelerator``,
which asks ``at::detail::getCUDAHooks().isBuilt()``). The library registers a device guard that
does nothing (one device, index 0, one default stream, events always complete) and CUDA hooks that
say "built, available, one device", and fills the CUDA slot of the attention kernel choice (which
``scaled_dot_product_attention`` asks: flash, memory-efficient or math, as a recent card picks for
the common cases). It is compiled once with ``torch.utils.cpp_extension`` (about
5-40 s) into the user's cache directory, keyed by the torch version, and loaded from there only
when that folder is private to the user and the library's digest is the one recorded at its build
(``fake_cuda_cache.py``); otherwise it is built afresh in a private temporary folder.

The hooks are read once per process (``getCUDAHooks`` caches them at the first call, which
``import torch`` makes), so the library must be loaded *before* torch is imported: ``preload()``
does that with ``ctypes``, loading torch's own ``libc10``/``libtorch_cpu`` first. In a process that
already imported torch, fake CUDA is out of reach: ``gpumemlab plan`` runs scripts in a fresh
process for this reason, and ``gml.capture(fake=True)`` falls back to fake tensors of device type
``cpu`` counted as the GPU (``status()`` says which).

Where torch was built with CUDA (``torch/version.py``'s ``cuda`` is set) and the driver sees a
device, nothing is built or loaded: its own guard and hooks serve the fakes. On such a build
*without a CUDA driver or device* torch's own ``FakeGuardImpl`` carries fake CUDA tensors forward,
but autograd's backward asks the CUDA hooks ``hasPrimaryContext`` for each device and torch's real
hooks refuse every index: there ``preload()`` builds and loads ``fake_cuda_nodriver.SOURCE``
instead (CUDA hooks only, registered at a priority that wins over torch's own). In a process that
imported torch first, ``status()`` says ``"backward": False`` there and ``device="auto"`` takes
fake CPU tensors.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys

from . import fake_cuda_cache, fake_cuda_nodriver

__all__ = ["SOURCE", "library_path", "cuda_build", "build", "preload", "status", "no_cuda_device",
           "NO_BACKWARD", "FakeCudaUnavailable", "FakeCudaBuildFailed"]

SOURCE = r"""
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/Context.h>
#include <ATen/native/transformers/attention.h>

namespace {
using c10::Device; using c10::DeviceIndex; using c10::DeviceType; using c10::Stream;
const Device kDev(DeviceType::CUDA, 0);
// Every answer is "device 0, default stream, already done": fake tensors run no kernels.
struct GmlFakeCudaGuard final : public c10::impl::DeviceGuardImplInterface {
  DeviceType type() const override { return DeviceType::CUDA; }
  Device exchangeDevice(Device) const override { return kDev; }
  Device getDevice() const override { return kDev; }
  void setDevice(Device) const override {}
  void uncheckedSetDevice(Device) const noexcept override {}
  Stream getStream(Device) const noexcept override { return Stream(Stream::DEFAULT, kDev); }
  Stream getNewStream(Device, int) const override { return Stream(Stream::DEFAULT, kDev); }
  Stream exchangeStream(Stream) const noexcept override { return Stream(Stream::DEFAULT, kDev); }
  DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const Stream&, const DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const DeviceIndex) const noexcept override {}
  bool queryStream(const Stream&) const override { return true; }
  void synchronizeStream(const Stream&) const override {}
};
C10_REGISTER_GUARD_IMPL(CUDA, GmlFakeCudaGuard);
}  // namespace

namespace at {
struct GmlFakeCUDAHooks : public CUDAHooksInterface {
  GmlFakeCUDAHooks(CUDAHooksArgs) {}
""" + fake_cuda_nodriver.HOOKS_MEMBERS + r"""};
C10_REGISTER_CLASS(CUDAHooksRegistry, CUDAHooks, GmlFakeCUDAHooks);
}  // namespace at

""" + fake_cuda_nodriver.SDP_CHOICE + r"""
namespace {
struct GmlSdpChoice {
  GmlSdpChoice() { at::native::_fused_sdp_choice_stub.set_cuda_dispatch_ptr(&gml_sdp_choice); }
} gml_sdp_choice_registered;
}  // namespace

extern "C" int gml_fake_cuda_built() { return at::detail::getCUDAHooks().isBuilt() ? 1 : 0; }
"""

_NAME = "gml_fake_cuda"
_state = {"loaded": False, "reason": None}


class FakeCudaUnavailable(RuntimeError):
    """Fake CUDA tensors cannot be had in this process; the message says why and what to do."""


class FakeCudaBuildFailed(FakeCudaUnavailable):
    """The machine has what the build needs (Linux, a C++ compiler) and compiling the library with
    this torch failed: a defect of the kit or of that torch build, never a missing tool."""


def _torch_dir() -> str:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise FakeCudaUnavailable("torch is not installed")
    return spec.submodule_search_locations[0]


def _torch_version() -> str:
    path = os.path.join(_torch_dir(), "version.py")
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=", 1)[1].strip().strip("'\"")
    return "unknown"


def _cache_base() -> str:
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def _cache_dir() -> str:
    key = hashlib.sha256((_source() + _torch_version() + sys.version).encode()).hexdigest()[:12]
    return os.path.join(_cache_base(), "gpumemlab", "fake_cuda", f"torch-{_torch_version()}-{key}")


def library_path() -> str:
    """Where the cached library would be (it is loaded from there only after the checks of
    ``fake_cuda_cache``: a private folder of the user's, the digest recorded at its build)."""
    return os.path.join(_cache_dir(), f"{_NAME}.so")


def cuda_build() -> bool:
    """Is the installed torch built with CUDA? Read from ``torch/version.py`` (``cuda = None`` on
    a CPU-only build) without importing torch, which must not be imported before the library."""
    path = os.path.join(_torch_dir(), "version.py")
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.replace(" ", "").startswith("cuda:") or line.replace(" ", "").startswith("cuda="):
                return line.split("=", 1)[1].strip() not in ("None", "")
    return False


NO_BACKWARD = ("a CUDA build of torch without a CUDA driver or device runs fake CUDA tensors forward "
               "but not backward unless the kit's hooks library was loaded before torch (autograd "
               "asks the CUDA hooks for each device's context): gpumemlab plan SCRIPT loads it in "
               "a fresh process; in Python, plan on fake CPU tensors (gml.plan(..., device='cpu'))")


def _driver_has_device() -> bool:
    if "driver" not in _state:
        _state["driver"] = fake_cuda_nodriver.device_count() > 0
    return _state["driver"]


def _needs_library() -> bool:
    """A CPU-only torch needs the library; a CUDA build only where the driver sees no device."""
    return not cuda_build() or not _driver_has_device()


def _source() -> str:
    return SOURCE if not cuda_build() else fake_cuda_nodriver.SOURCE


def no_cuda_device() -> bool:
    """A CUDA build of torch on a machine with no CUDA device (or no driver)? Imports torch (which a
    CUDA build allows at any time) and asks its own device count, which the kit's ``torch.cuda``
    patches do not reach."""
    if "none" not in _state:     # asked on every fake dispatch: once per process
        if not cuda_build():
            _state["none"] = False
        else:
            import torch
            _state["none"] = torch._C._cuda_getDeviceCount() == 0
    return _state["none"]


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def build(quiet: bool = True) -> str | None:
    """The path of a verified library, compiled if there is none (``fake_cuda_cache`` decides the
    folder and checks the library's digest); None on a CUDA build of torch on a machine whose
    driver sees a device, which needs none (without one, the hooks of ``fake_cuda_nodriver``). Runs the compiler in a child process (``cpp_extension`` needs torch
    imported, and this process may not want it)."""
    if not _needs_library():
        return None
    if sys.platform != "linux":
        raise FakeCudaUnavailable(f"fake CUDA tensors are built for Linux only (this is {sys.platform})")
    folder = fake_cuda_cache.private_folder(_cache_dir(), _cache_base())
    found = fake_cuda_cache.verified_library(folder)
    if found:
        return found
    if _compiler() is None:
        raise FakeCudaUnavailable("fake CUDA tensors need a C++ compiler: install one "
                                  "(Debian/Ubuntu: apt install g++; Fedora: dnf install gcc-c++)")
    # a library without its digest is not ours (or half-written): remove it, or ninja keeps it
    fake_cuda_cache.clear_library(folder)
    src = os.path.join(folder, f"{_NAME}.cpp")
    with open(src, "w", encoding="utf-8") as f:
        f.write(_source())
    env = dict(os.environ)
    try:   # the ninja wheel (a dependency) puts its binary beside the package, not on PATH
        import ninja
        env["PATH"] = ninja.BIN_DIR + os.pathsep + env.get("PATH", "")
    except ImportError:
        pass
    code = ("from torch.utils.cpp_extension import load\n"
            f"load({_NAME!r}, [{src!r}], build_directory={folder!r}, "
            "is_python_module=False, extra_cflags=['-O1'], verbose=False)\n")
    path = os.path.join(folder, fake_cuda_cache.LIBRARY)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if run.returncode != 0 or not os.path.exists(path):
        last = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
        raise FakeCudaBuildFailed(f"building the fake-CUDA library failed: {last[0][:300]}")
    return fake_cuda_cache.record_digest(folder)


def preload() -> bool:
    """Load the library before torch is imported (building it first if needed). Returns True when
    fake CUDA tensors will work in this process; else ``status()`` says why."""
    if _state["loaded"]:
        return True
    try:
        if "torch" in sys.modules:
            import torch
            if torch.backends.cuda.is_built():
                _state["loaded"] = True
                return True
            raise FakeCudaUnavailable("torch was imported before the fake-CUDA library could be "
                                      "loaded (it must come first)")
        if not _needs_library():
            # torch's own CUDA hooks serve fake tensors (a device is there)
            _state["loaded"] = True
            return True
        path = build()
        lib = os.path.join(_torch_dir(), "lib")
        for name in ("libc10.so", "libtorch_cpu.so"):
            ctypes.CDLL(os.path.join(lib, name), mode=ctypes.RTLD_GLOBAL)
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        if cuda_build():
            _state["hooks"] = True
            _import_torch_quietly()
            ctypes.CDLL(path).gml_take_sdp_choice()
    except (FakeCudaUnavailable, OSError) as exc:
        _state["reason"] = str(exc)
        return False
    _state["loaded"] = True
    return True


def _import_torch_quietly() -> None:
    """``import torch`` with the one line its hooks registry prints on meeting ours left out of
    stderr (written to the file descriptor by C++, so it is caught there)."""
    import tempfile
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            import torch  # noqa: F401
        finally:   # what else torch printed comes back, even when the import failed
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines = tmp.read().decode("utf-8", "replace").splitlines(True)
            sys.stderr.write("".join(x for x in lines if fake_cuda_nodriver.SKIPPED_LINE not in x))


def status() -> dict:
    """``{"cuda": bool, "backward": bool, "reason": str|None}``: can this process make fake CUDA
    tensors, and run autograd's backward on them?"""
    if "torch" in sys.modules or _state["loaded"]:
        if no_cuda_device() and not _state.get("hooks"):
            return {"cuda": True, "backward": False, "reason": NO_BACKWARD}
    if _state["loaded"]:
        return {"cuda": True, "backward": True, "reason": None, "cache": fake_cuda_cache.last_reason()}
    if "torch" in sys.modules:
        import torch
        if torch.backends.cuda.is_built():
            return {"cuda": True, "backward": True, "reason": None}
        return {"cuda": False, "backward": False, "reason": _state["reason"] or
                "torch is CPU-only and the fake-CUDA library was not loaded before torch "
                "(gpumemlab plan loads it in a fresh process)"}
    return {"cuda": False, "backward": False,
            "reason": _state["reason"] or "not loaded yet (call preload())"}
