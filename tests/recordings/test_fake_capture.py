"""Fake-tensor capture: the same trace as a real CPU capture, exact model-state bytes, activations
derived by hand, autocast and inference, and one clear line for a step fake tensors cannot run."""
import os

import pytest

torch = pytest.importorskip("torch")

from gpumemlab.recordings.capture import capture  # noqa: E402
from gpumemlab.recordings.fake import fake_tensors  # noqa: E402
from gpumemlab.planner.trace import Config, Setup, StepFailed, trace  # noqa: E402


def _mlp(d_in=100, d_hidden=30, d_out=7):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d_in, d_hidden), torch.nn.ReLU(),
                               torch.nn.Linear(d_hidden, d_out))


def _steps(model, opt, x, n=2):
    for _ in range(n):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def frames(rec):
    """Each entry's frames up to ``_steps`` (the two runs call it from different lines)."""
    out = []
    for e in rec.trace:
        fr = [(f["filename"], f["line"], f["name"]) for f in e["frames"]]
        names = [f[2] for f in fr]
        out.append(fr[:names.index("_steps") + 1] if "_steps" in names else fr)
    return out


def _shape(rec):
    return [(e["action"], e["size"], e.get("category")) for e in rec.trace]


def test_fake_capture_equals_a_real_cpu_capture_of_the_same_step():
    # SGD with momentum: Adam's step counters are made by torch.tensor(), which a real capture
    # sees only when first used (no aten op makes them) and a fake one sees at birth
    real = _mlp()
    opt = torch.optim.SGD(real.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(16, 100)
    with capture(real, opt) as rec_real:
        _steps(real, opt, x)

    fs = fake_tensors("cpu")
    fake = fs.module(_mlp())
    with fs:
        fopt = torch.optim.SGD(fake.parameters(), lr=0.1, momentum=0.9)
        fx = torch.randn(16, 100)
    with capture(fake, fopt, fake=fs) as rec_fake:
        _steps(fake, fopt, fx)
    assert len(rec_real.trace) > 20
    assert _shape(rec_fake) == _shape(rec_real)       # same sizes, same order, same categories
    assert any(frames(rec_real))
    assert frames(rec_fake) == frames(rec_real)       # and the same Python frames, up to _steps
    assert all(isinstance(p, torch.nn.Parameter) and p.device.type == "cpu"
               for p in real.parameters())             # the real model was not touched


def test_model_state_bytes_exact_for_adamw():
    # Linear(100,30) + Linear(30,7): weights and biases by hand, fp32
    params = 100 * 30 + 30 + 30 * 7 + 7
    setup = Setup(model=_mlp, optimizer=lambda p: torch.optim.AdamW(p), inputs=(16, 100),
                  device="cpu")
    rec = trace(setup, Config(batch_size=16, steps=2))
    by = rec.bytes_by_category()
    assert rec.param_count == params
    assert by["parameter"] == 4 * params
    # two steps, set_to_none between them: each step makes every gradient once
    assert by["gradient"] == 2 * 4 * params
    # AdamW: exp_avg and exp_avg_sq in fp32 per parameter, and one fp32 0-d step counter per tensor
    assert by["optimizer_state"] == 2 * 4 * params + 4 * 4


def test_activations_of_a_linear_stack_by_hand():
    b, d = 32, 64
    model = lambda: torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.ReLU(),  # noqa: E731
                                        torch.nn.Linear(d, d))
    setup = Setup(model=model, optimizer=lambda p: torch.optim.SGD(p, lr=0.1), inputs=(b, d),
                  device="cpu", loss=lambda out: out.sum())
    rec = trace(setup, Config(batch_size=b, steps=1))
    acts = [e["size"] for e in rec.trace if e["action"] == "alloc" and e["category"] == "activation"]
    # saved for backward: ReLU's output (its own backward and the second Linear's weight
    # gradient need it); the first Linear's output dies once ReLU has read it (a temporary), the
    # input x is the batch, the second Linear's output feeds only sum() (saves nothing). Then two
    # 0-d fp32 tensors alive as backward begins: the loss, and the ones backward() seeds it with
    assert acts == [b * d * 4, 4, 4]


def test_autocast_bf16_and_inference():
    setup = Setup(model=_mlp, optimizer=lambda p: torch.optim.AdamW(p), inputs=(16, 100),
                  device="cpu")
    mixed = trace(setup, Config(batch_size=16, steps=1, precision="bf16"))
    # autocast casts each weight to bf16 for its matmul: half the fp32 bytes, in the forward
    bf16_weight_copies = [e["size"] for e in mixed.trace if e["action"] == "alloc"
                          and e["category"] in ("activation", "temporary") and e["size"] == 100 * 30 * 2]
    assert bf16_weight_copies
    infer = trace(Setup(model=_mlp, inputs=(16, 100), device="cpu"), Config(batch_size=16, steps=1))
    by = infer.bytes_by_category()
    assert by["gradient"] == by["optimizer_state"] == by["activation"] == 0


def test_a_step_that_reads_a_value_fails_with_one_line():
    def bad_loss(out):
        if out.sum().item() > 0:     # data-dependent: a fake tensor has no value
            return out.mean()
        return out.sum()
    setup = Setup(model=_mlp, optimizer=lambda p: torch.optim.AdamW(p), inputs=(4, 100),
                  device="cpu", loss=bad_loss)
    with pytest.raises(StepFailed) as info:
        trace(setup, Config(batch_size=4, steps=1))
    msg = str(info.value)
    assert "\n" not in msg and "fake tensors could not run the step" in msg and ".item()" in msg


def test_capture_device_filter_keeps_only_that_device():
    with capture(frames=False, device="meta") as rec:
        torch.empty(100, device="meta")
        torch.empty(50)                     # a CPU tensor: not on the recorded device
    assert [e["size"] for e in rec.trace if e["action"] == "alloc"] == [400]


def test_without_a_compiler_one_line_says_what_to_install(monkeypatch, tmp_path):
    from gpumemlab.recordings import fake_cuda
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))          # nothing built there yet
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: None)
    monkeypatch.setattr(fake_cuda, "cuda_build", lambda: False)   # the CPU-only torch's path
    with pytest.raises(fake_cuda.FakeCudaUnavailable) as info:
        fake_cuda.build()
    assert "install" in str(info.value) and "\n" not in str(info.value)


def test_a_cuda_build_needs_no_compiler(monkeypatch, tmp_path):
    from gpumemlab.recordings import fake_cuda
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: None)
    monkeypatch.setattr(fake_cuda, "cuda_build", lambda: True)    # torch's own hooks serve
    monkeypatch.setitem(fake_cuda._state, "driver", True)         # where the driver sees a card
    assert fake_cuda.build() is None
    assert not os.listdir(tmp_path)                               # nothing written either


def test_a_cuda_build_without_a_driver_wants_its_hooks_built(monkeypatch, tmp_path):
    from gpumemlab.recordings import fake_cuda, fake_cuda_nodriver
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(fake_cuda, "_compiler", lambda: None)
    monkeypatch.setattr(fake_cuda, "cuda_build", lambda: True)
    monkeypatch.setitem(fake_cuda._state, "driver", False)
    with pytest.raises(fake_cuda.FakeCudaUnavailable) as info:
        fake_cuda.build()
    assert "install" in str(info.value)
    assert fake_cuda._source() == fake_cuda_nodriver.SOURCE      # the hooks only, no guard
    assert "REGISTRY_PREFERRED" in fake_cuda._source()


def test_after_torch_is_imported_fake_cuda_falls_back_to_cpu_labelled():
    from gpumemlab.recordings import fake_cuda
    if torch.backends.cuda.is_built():
        pytest.skip("CPU builds only: a CUDA build of torch makes fake CUDA tensors itself, "
                    "so there is no fallback to fake CPU tensors to check")
    assert fake_cuda.preload() is False
    assert "before" in fake_cuda.status()["reason"]
    fs = fake_tensors("auto")
    assert fs.device == "cpu" and "counted as the GPU" in fs.label
    with pytest.raises(fake_cuda.FakeCudaUnavailable):
        fake_tensors("cuda")


def test_capture_fake_true_makes_the_body_fake():
    with capture(fake=True, frames=False) as rec:
        model = torch.nn.Linear(4096, 4096)          # 64 MiB of weights, none of it allocated
        model(torch.randn(8, 4096)).sum().backward()
    assert rec.fake.device in ("cpu", "cuda")
    assert type(model.weight).__name__ == "FakeTensor"
    sizes = [e["size"] for e in rec.trace if e["action"] == "alloc"]
    assert 4096 * 4096 * 4 in sizes


def test_a_session_can_be_entered_again_by_a_capture_inside_it():
    with fake_tensors("cpu") as fs:
        model = torch.nn.Linear(64, 64)
        with capture(model, fake=fs, frames=False) as rec:
            model(torch.randn(2, 64)).sum().backward()
        assert type(model.weight.grad).__name__ == "FakeTensor"
    assert torch.nn.init.trunc_normal_.__module__ == "torch.nn.init"   # patches undone
    assert rec.bytes_by_category()["gradient"] == 64 * 64 * 4 + 64 * 4


def test_auto_takes_fake_cpu_where_backward_on_fake_cuda_stops(monkeypatch):
    # a CUDA build without a driver, torch imported before the kit's hooks library (a notebook)
    from gpumemlab.recordings import fake_cuda
    monkeypatch.setattr(fake_cuda, "no_cuda_device", lambda: True)
    monkeypatch.setitem(fake_cuda._state, "hooks", False)
    status = fake_cuda.status()
    assert status["cuda"] is True and status["backward"] is False
    assert "gpumemlab plan" in status["reason"] and "device='cpu'" in status["reason"]
    assert fake_tensors().device == "cpu"
    assert fake_tensors("cuda").device == "cuda"     # forward-only use is still allowed
    from gpumemlab.recordings.fake import explain
    line = explain(RuntimeError("hasPrimaryContext expects a valid device index, but got "
                                "device_index=0"))
    assert "\n" not in line and fake_cuda.NO_BACKWARD in line
