"""The doctor on pinned host memory's failures (message/host_path.py): the kit's own host OOM
(SimulatedGPU.pin raising as cudaHostAlloc does) read back with its rounding waste, the Linux OOM
killer after pinning named, and texts that are not the host path left to the other readers; in snapshot mode, the host figures beside the device verdict."""
import pytest

from gpumemlab.allocator.host import explain_host_oom
from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.doctor.message.mode import diagnose_message
from gpumemlab.units import GiB, format_size


def _host_oom_text(nbytes, host):
    gpu = SimulatedGPU("8GiB", alloc_conf="", host_memory=host)
    try:
        gpu.pin(nbytes)
    except RuntimeError as exc:
        return ("  buffer = torch.empty(size, dtype=torch.uint8, pin_memory=True)\n"
                f"RuntimeError: {exc}")
    raise AssertionError("the pin fitted")


def test_a_failed_pin_is_named_with_the_rounding_the_allocator_added():
    request = int(20.4 * GiB)
    d = diagnose_message(_host_oom_text(request, "24GiB"))
    facts = explain_host_oom(request)
    assert d.kind == "not_pytorch_allocator" and d.details["framework"] == "pytorch_pinned_host"
    # the message prints the request to two decimals of GiB: read back within half of one
    assert abs(d.requested_bytes - request) <= 0.005 * GiB
    assert d.details["host"]["block_size"] == 32 * GiB == facts["block_size"]
    assert d.details["host"]["rounding_waste"] == 32 * GiB - d.requested_bytes
    assert format_size(facts["rounding_waste"]) in d.summary
    assert any(f.alloc_conf == "pinned_max_round_threshold_mb:64" for f in d.fixes)


def test_the_threshold_it_gives_pins_the_request_exactly():
    # a 48 MiB request: a threshold of 64 would still round it, so the fix must be below it
    d = diagnose_message(_host_oom_text(48 << 20, "48MiB"))
    conf = next(f.alloc_conf for f in d.fixes if f.name == "pinned_max_round_threshold_mb")
    assert SimulatedGPU("8GiB", alloc_conf=conf).pin(d.requested_bytes).size == 48 << 20
    assert d.details["host"]["rounding_waste"] == 16 << 20


def test_the_oom_killer_after_pinning_is_named():
    text = ("train.py: DataLoader(ds, num_workers=8, pin_memory=True)\n"
            "[12345.678] Out of memory: Killed process 4242 (python) total-vm:98765432kB")
    d = diagnose_message(text)
    assert d.details["framework"] == "pytorch_pinned_host"
    assert "oom_killer" in d.details["failures"]
    assert not d.details["host_requested_from_text"] and "cannot be swapped" in d.summary


def test_a_device_oom_in_a_pinned_loader_is_still_the_device_allocators():
    text = ("DataLoader(..., pin_memory=True)\ntorch.OutOfMemoryError: CUDA out of memory. Tried "
            "to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.06 GiB is "
            "free. Of the allocated memory 20.10 GiB is allocated by PyTorch, and 1.90 GiB is "
            "reserved by PyTorch but unallocated.")
    d = diagnose_message(text)
    assert d.details.get("framework") is None and d.details["form"] == "2.1+"


def test_tensorflows_pinned_host_error_stays_with_the_foreign_reader():
    text = ("W tensorflow/core/common_runtime/device/device_host_allocator.h:46] could not "
            "allocate pinned host memory of size: 34359738368")
    assert diagnose_message(text).details["framework"] == "host_pinned"


def test_a_snapshot_with_pinned_memory_gets_the_host_figures_beside_the_device_verdict():
    """Snapshot mode: a device OOM in a run that pinned 20.4 MiB keeps its device verdict and
    adds the host figures (32 MiB pinned, 11.6 MiB of it rounding) as evidence and details."""
    import gpumemlab as gml

    def run(record_host):
        gpu = gml.SimulatedGPU("1GiB", record_pinned_host_memory=record_host)
        gpu.keep = [gpu.pin(int(20.4 * 2**20)), gpu.empty(300 * 2**20)]
        with pytest.raises(gml.OutOfMemoryError):
            gpu.empty(900 * 2**20)
        return gml.doctor(gpu.snapshot(), search=False)

    with_host, without = run(True), run(False)
    assert with_host.kind == without.kind == "exhaustion"
    host = with_host.details["host"]
    assert (host["pinned_bytes"], host["blocks"]) == (32 * 2**20, 1)
    assert host["rounding_waste_bytes"] == 32 * 2**20 - int(20.4 * 2**20)
    assert any(line.startswith("pinned host memory: 32.00 MiB in 1 block (requested 20.40 MiB,"
                               " rounding waste 11.60 MiB") for line in with_host.evidence)
    assert without.details["host"] is None
    assert not any("pinned host" in line for line in without.evidence)


# A DataLoader's pin-memory traceback that prints no size, in the shape of Pointcept/Pointcept#101
# (written here, not copied): the doctor has no request to read.
_NO_SIZE = ('  File "/opt/conda/lib/python3.8/site-packages/torch/utils/data/_utils/pin_memory.py",'
            ' line 58, in pin_memory\n    return data.pin_memory(device)\n'
            "RuntimeError: CUDA error: out of memory\n"
            "CUDA kernel errors might be asynchronously reported at some other API call.\n")


def test_a_paste_without_a_size_gets_no_figures_as_its_own():
    """D1: a figure the paste does not print is not the user's: null in the JSON, and the summary
    calls its 20.40 GiB an example. Before: details.host.requested was 21,904,333,209 bytes and
    the summary said "a 20.40 GiB buffer pins 32.00 GiB" as a fact."""
    import json

    d = diagnose_message(_NO_SIZE)
    host = json.loads(d.json())["details"]["host"]
    assert d.requested_bytes is None
    assert host["requested"] is None and host["block_size"] is None
    assert host["rounding_waste"] is None
    assert d.details["host_example"]["block_size"] == 32 * GiB
    assert "the paste prints no size, so for example, a 20.40 GiB buffer would pin 32.00 GiB" \
        in d.summary
    sized = diagnose_message(_host_oom_text(48 << 20, "48MiB"))
    assert sized.details["host_example"] is None and sized.details["host"]["requested"]


def test_the_headline_names_pytorchs_pinned_host_allocator():
    """D3: the headline agrees with the summary. Before: "kind: not a PyTorch allocator OOM"
    above a summary about PyTorch's pinned host allocator."""
    from gpumemlab.doctor.report_html import to_html

    d = diagnose_message(_NO_SIZE)
    head = str(d).splitlines()[1]
    assert head == ("kind: PyTorch's pinned host allocator (host memory), not the GPU's caching "
                    "allocator")
    assert "not a PyTorch allocator OOM" not in to_html(d)
    other = diagnose_message("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of "
                             "memory while trying to allocate 6291456 bytes.")
    assert "kind: not a PyTorch allocator OOM" in str(other)


def test_evidence_quotes_the_paste_as_written():
    """D7: the evidence quotes the paste's words, not the whitespace-free string the patterns
    search. Before: oom: 'CUDAerror:outofmemory'."""
    d = diagnose_message(_NO_SIZE)
    assert "oom: 'CUDA error: out of memory'" in d.evidence
    assert not any("CUDAerror" in line for line in d.evidence)
    thread = diagnose_message("RuntimeError: Caught RuntimeError in pin memory\n thread for "
                              "device 0.")
    assert "thread: 'Caught RuntimeError in pin memory thread'" in thread.evidence


def _documented_pinned_host():
    """docs/DOCTOR.md's table of a pinned-host report's details: field -> type words."""
    import pathlib
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "DOCTOR.md").read_text()
    part = text.split("### Message mode: pinned host memory\n", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[0] != "`field`":
            rows[cells[0].strip("`")] = {t.strip() for t in cells[1].split(" or ")}
    return rows


def _flat(value, path, out):
    names = {int: "int", str: "str", list: "list", dict: "dict", bool: "bool", type(None): "null"}
    out.setdefault(path, set()).add(names[type(value)])
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(v, f"{path}.{k}", out)
    return out


def test_the_docs_list_every_pinned_host_detail_with_its_type():
    """D2: every key of a pinned-host report's details (with and without a size in the paste) is
    in DOCTOR.md's table, with its type, and every row is seen. Before: no such table."""
    import json

    doc = _documented_pinned_host()
    seen = {}
    for text in (_NO_SIZE, _host_oom_text(48 << 20, "48MiB")):
        for k, v in json.loads(diagnose_message(text).json())["details"].items():
            _flat(v, f"details.{k}", seen)
    assert set(seen) == set(doc), (sorted(set(seen) - set(doc)), sorted(set(doc) - set(seen)))
    for path, types in seen.items():
        assert types <= doc[path], (path, types, doc[path])
