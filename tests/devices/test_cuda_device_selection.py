"""gml.device(): the simulator without CUDA, the GPUMEMLAB_DEVICE override, clear errors."""
import pytest

from gpumemlab.devices.cuda import CudaGPU, cuda_available, device


def test_auto_gives_a_device_that_says_which_it_is(monkeypatch):
    monkeypatch.delenv("GPUMEMLAB_DEVICE", raising=False)
    gpu = device()
    expected = "cuda" if cuda_available() else "simulated"
    assert gpu.kind == expected
    line = gpu.describe()
    assert "\n" not in line and ("simulated" in line if expected == "simulated" else "CUDA" in line)
    if expected == "cuda":
        gpu.close()


def test_env_override_to_simulator(monkeypatch):
    monkeypatch.setenv("GPUMEMLAB_DEVICE", "sim")
    gpu = device(memory="2GiB", alloc_conf="expandable_segments:True")
    assert gpu.kind == "simulated" and gpu.total_memory == 2 * 1024**3
    assert "expandable_segments:True" in gpu.describe()


def test_bad_kind_and_env(monkeypatch):
    with pytest.raises(ValueError, match="kind must be"):
        device("tpu")
    monkeypatch.setenv("GPUMEMLAB_DEVICE", "quantum")
    with pytest.raises(ValueError, match="GPUMEMLAB_DEVICE"):
        device()


@pytest.mark.skipif(cuda_available(), reason="checks the no-CUDA error path")
def test_cuda_requested_without_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GPUMEMLAB_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="torch.cuda.is_available"):
        device()
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        CudaGPU("1GiB")
