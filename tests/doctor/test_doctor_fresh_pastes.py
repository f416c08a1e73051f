"""The doctor on real pastes a fresh-eyes run read wrongly (each also in the corpus, with its URL):
old llama.cpp and TensorFlow-on-ROCm OOMs refused, an Intel XPU request at the 4 GiB limit left
unknown, unknown with no fixes, max_split_size_mb without its 1.10 caveat, an MPS ratio set too
late, XLA's BFC Stats block unread and EXLA taken for JAX, a second allocator in the process and
vLLM's start-up budget."""
import json
import pathlib

from gpumemlab.doctor.message.mode import diagnose_message

GiB = 1 << 30
CORPUS = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "oom_messages" / "corpus.jsonl"
PASTE = {p["id"]: p["text"] for p in map(json.loads, CORPUS.read_text("utf-8").splitlines())}


def test_old_llamacpp_and_tensorflow_on_rocm_are_named_not_refused():
    d = diagnose_message(PASTE["llamacpp-3199"])
    assert d.details["framework"] == "llamacpp" and d.details["figures"]["device"] == 0
    d = diagnose_message(PASTE["keras-13889"])
    assert d.details["framework"] == "tensorflow" and d.requested_bytes == 933298432


def test_xpu_at_the_4_gib_limit_with_nothing_held_is_the_limit():
    text = PASTE["ipex-846"]
    for request, last in (("8.00 GiB", False), ("4.00 GiB", True)):
        one = [line for line in text.splitlines() if request in line][0] if not last else text
        d = diagnose_message(one)
        assert d.kind == "unexplained" and d.details["rule"] == "per_allocation_limit", d.summary
        assert d.details["per_allocation_limit_bytes"] == 4 * GiB
        assert d.fixes[0].name == "per_allocation_limit"
    # at the limit itself (4.00 GiB) the doctor says why 4 GiB counts
    assert any("max_mem_alloc_size" in b for b in d.details["borderline"])
    # XPU's own words: its memory API, no CUDA hint remark
    said = " ".join(d.cannot_tell)
    assert "torch.xpu.set_per_process_memory_fraction" in said
    assert "torch.cuda" not in said and "#173049" not in said


def test_unknown_still_says_hold_less_and_cuda_malloc_async_gets_it():
    d = diagnose_message(PASTE["joycaption-28"])
    assert d.kind == "unknown" and [f.name for f in d.fixes] == ["reduce_peak_memory"]


def test_max_split_size_mb_on_a_hintless_1_4_message_carries_the_1_10_caveat():
    d = diagnose_message(PASTE["pytorch-35901"])
    fix = next(f for f in d.fixes if f.name == "max_split_size_mb")
    assert "1.10" in fix.why and "torch.__version__" in fix.why
    # with the hint line (1.10 or later) no caveat
    hinted = PASTE["pytorch-35901"].replace("PyTorch)", "PyTorch) If reserved memory is >> "
                                            "allocated memory try setting max_split_size_mb")
    fix = next(f for f in diagnose_message(hinted).fixes if f.name == "max_split_size_mb")
    assert "1.10" not in fix.why


def test_an_mps_ratio_set_too_late_is_said_not_recommended_again():
    d = diagnose_message(PASTE["pytorch-96814"])
    names = [f.name for f in d.fixes]
    assert "mps_ratio_not_applied" in names and "mps_high_watermark" not in names
    assert "did not take effect" in d.fixes[names.index("mps_ratio_not_applied")].why
    line = next(e for e in d.evidence if e.startswith("max allowed"))
    assert "recommended working set" in line and "one limit" in line
    # the message's own "Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0" is not a setting
    bare = PASTE["pytorch-96814"].split("```")[3]
    assert "mps_high_watermark" in [f.name for f in diagnose_message(bare).fixes]


def test_exla_is_named_with_its_own_options_and_the_bfc_stats_lead():
    d = diagnose_message(PASTE["elixir-xla-32"])
    assert d.details["framework"] == "exla"
    assert "XLA_PYTHON_CLIENT" not in d.summary and ":memory_fraction" in d.summary
    assert d.evidence[1].startswith("the BFC pool's limit is 4.59 GiB")
    assert any("no free block at all" in e for e in d.evidence)


def test_tensorflow_oom_with_a_stats_block_reads_the_block():
    text = ("Stats:\nLimit:                      4928097484\nInUse:                      "
            "4248542720\nMaxInUse:                   4248542720\nNumAllocs:                  "
            "1040\nLargestFreeBlock:                    0\n\ntensorflow.python.framework.errors_"
            "impl.ResourceExhaustedError: OOM when allocating tensor with shape[256,112,112,64] "
            "and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator "
            "GPU_0_bfc")
    d = diagnose_message(text)
    assert d.details["figures"]["pool_limit_bytes"] == 4928097484
    assert any("the pool is full" in e for e in d.evidence)


def test_a_second_allocator_in_the_process_and_vllms_budget():
    d = diagnose_message(PASTE["lerf-73"])
    assert any("second allocator" in e and "3.88 GiB" in e for e in d.evidence)
    d = diagnose_message(PASTE["vllm-13882"])
    fig = d.details["figures"]
    assert fig["budget_bytes"] == round(5.60 * GiB) and fig["weights_bytes"] == round(5.20 * GiB)
    assert "1.05 GiB below zero" in d.summary


def test_an_xpu_free_figure_that_is_total_minus_reserved_is_said_to_be_an_estimate():
    d = diagnose_message(PASTE["xpuops-3011"])      # 5.65 GiB free of 5.65 GiB, 2 MiB reserved
    assert any("PyTorch's own estimate" in e for e in d.evidence)
    # a free figure the driver reported (less than total - reserved) gets no such line
    other = PASTE["xpuops-3011"].replace("of which 5.65 GiB is free", "of which 4.90 GiB is free")
    assert not any("estimate" in e for e in diagnose_message(other).evidence)
