"""gml.plan: per-step peaks, fits, the largest batch and smallest card verified by replay, levers,
a model too large for the card, and the rules of thumb computed by hand."""
import pytest

torch = pytest.importorskip("torch")

import gpumemlab as gml  # noqa: E402
from gpumemlab.planner.crosscheck import bytes_per_parameter, playbook_activations  # noqa: E402
from gpumemlab.planner.models import gpt, parameter_count  # noqa: E402
from gpumemlab.planner.trace import Config, Setup, trace  # noqa: E402
from gpumemlab.recordings.replay import replay  # noqa: E402

MiB = 1 << 20
CTX = 64 * MiB


def _mlp():
    return torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])


def _adamw(p):
    return torch.optim.AdamW(p)


def test_plan_steps_categories_and_fits():
    p = gml.plan(_mlp, _adamw, (64, 512), total_memory=CTX + 64 * MiB, context_bytes=CTX,
                 batch_size=64, device="cpu", levers=False, largest_batch=False, settings=False)
    steps = {row["step"]: row for row in p.steps}
    assert list(steps) == ["before", "step 1", "step 2", "step 3"]
    # AdamW's state arrives in step 1's optimizer.step, so step 2 starts with it and peaks higher
    state = 2 * p.params * 4
    assert steps["step 2"]["peak_allocated_bytes"] >= steps["step 1"]["peak_allocated_bytes"]
    assert steps["step 2"]["peak_allocated_bytes"] - steps["before"]["peak_allocated_bytes"] >= state
    assert p.fits and p.shortfall_bytes == 0
    assert p.peak_reserved_bytes <= p.capacity_bytes
    assert p.by_category["parameter"] == p.params * 4
    d = p.as_dict()
    assert d["fits"] is True and d["total_memory_bytes"] == CTX + 64 * MiB
    assert "FITS" in p.report()


def test_largest_batch_and_smallest_card_are_verified_by_replay():
    total = CTX + 48 * MiB
    p = gml.plan(_mlp, _adamw, (8, 512), total_memory=total, context_bytes=CTX, batch_size=8,
                 steps=2, device="cpu", levers=False, settings=False, max_batch=1 << 14)
    best = p.largest_batch
    assert best and best >= 8
    setup = Setup(model=_mlp, optimizer=_adamw, inputs=(8, 512), device="cpu")
    for b, ok in ((best, True), (best + 1, False)):
        rec = trace(setup, Config(batch_size=b, steps=2))
        assert (replay(rec, total_memory=total - CTX).oom is None) is ok
    card = p.smallest_card_bytes - CTX
    assert replay(p.capture, total_memory=card).oom is None
    assert replay(p.capture, total_memory=card - 2 * MiB).oom is not None


def test_too_large_says_by_how_much_and_which_levers_close_it():
    make = lambda: gpt(layers=2, hidden=128, heads=4, seq=256, vocab=512)  # noqa: E731
    tokens = lambda b: torch.randint(0, 512, (b, 256))  # noqa: E731
    p = gml.plan(make, _adamw, tokens, total_memory=CTX + 40 * MiB, context_bytes=CTX,
                 batch_size=8, steps=2, device="cpu", largest_batch=False, settings=False)
    assert not p.fits and p.shortfall_bytes > 0
    assert p.shortfall_bytes == p.peak_reserved_bytes - p.capacity_bytes
    names = {o.name: o for o in p.levers}
    full = names["checkpoint every block"]
    assert full.peak_reserved_bytes < p.peak_reserved_bytes and full.extra_compute > 0
    assert names["accumulate 2 micro-batches"].extra_compute == 0
    assert any(o.pareto for o in p.levers)
    text = p.report()
    assert "DOES NOT FIT" in text and "levers that close the" in text
    assert p.crosscheck["playbook"]["bytes"] == playbook_activations(
        layers=2, seq=256, batch=8, hidden=128, heads=4)


def test_rules_of_thumb_by_hand():
    assert bytes_per_parameter(1000)["bytes"] == 16_000            # fp32 AdamW: 4+4+8
    assert bytes_per_parameter(1000, training=False)["bytes"] == 4_000
    assert bytes_per_parameter(10, optimizer="SGD", momentum=True)["per_parameter"] == 12
    assert bytes_per_parameter(10, optimizer="SGD")["per_parameter"] == 8
    # L=2, s=256, b=8, h=128, a=4: 2*256*8*128*(34 + 5*4*256/128) = 524288 * 74
    assert playbook_activations(layers=2, seq=256, batch=8, hidden=128, heads=4) == 524288 * 74


def test_gpt_parameter_count_by_hand():
    dims = dict(layers=3, hidden=64, heads=4, seq=32, vocab=100)
    with torch.device("meta"):
        model = gpt(**dims)
    assert sum(p.numel() for p in model.parameters()) == parameter_count(**dims)


def test_a_meta_model_is_planned_and_left_untouched():
    with torch.device("meta"):
        model = _mlp()
    p = gml.plan(model, _adamw, (4, 512), total_memory="1GiB", context_bytes=CTX, batch_size=4,
                 steps=1, device="cpu", levers=False, largest_batch=False, settings=False)
    assert p.params == 4 * (512 * 512 + 512) and p.fits
    assert all(t.device.type == "meta" for t in model.parameters())
