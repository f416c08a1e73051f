"""The JSON of the doctor's snapshot mode and of gml.growth has exactly the fields, and the
types, that docs/DOCTOR.md ("JSON schema", "Snapshot mode") and docs/GROWTH.md ("JSON schema")
document: every field seen is documented with its type, every documented field is seen."""
import json
import pathlib
import re

import pytest

import gpumemlab as gml
from .test_doctor_devices_midrun import _device_run, _merge, _midrun

ROOT = pathlib.Path(__file__).resolve().parents[2]
KIT = ROOT / "tests" / "fixtures" / "snapshots" / "sim_fragmentation_oom.pickle"
ROW = re.compile(r"^\|\s*(`[^|]+`(?:\s*,\s*`[^|]+`)*)\s*\|\s*((?:[^|\\]|\\\|)+?)\s*\|")


def documented(doc: str, heading: str) -> dict:
    """path -> set of allowed types, from the table under ``heading`` (up to the next heading)."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    rest = text[start + len(heading) + 1:]
    end = re.search(r"^#{2,3} ", rest, re.M)
    out = {}
    for line in rest[:end.start() if end else len(rest)].splitlines():
        m = ROW.match(line)
        if not m:
            continue
        types = {t.strip() for t in re.split(r"\|(?![^\[]*\])", m.group(2).replace("\\|", "|"))}
        for path in re.findall(r"`([^`]+)`", m.group(1)):
            out[path] = types
    assert out, f"no table under {heading!r} in {doc}"
    return out


def _type(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    for t, name in ((int, "int"), (float, "float"), (str, "str"), (dict, "object")):
        if isinstance(v, t):
            return name
    kinds = sorted({_type(x) for x in v}, key=lambda k: (k == "null", k))
    return "list[" + "|".join(kinds) + "]"


def observed(value, path="", out=None) -> dict:
    """path -> set of types seen; lists of objects are entered as ``path[]``."""
    out = {} if out is None else out
    if path and not path.endswith("[]"):       # an element's own type is its list's
        out.setdefault(path, set()).add(_type(value))
    if isinstance(value, dict):
        for k, v in value.items():
            observed(v, f"{path}.{k}" if path else k, out)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                observed(v, path + "[]", out)
    return out


def check(seen: dict, doc: dict):
    assert set(seen) == set(doc), (sorted(set(seen) - set(doc)), sorted(set(doc) - set(seen)))
    for path, types in seen.items():
        for t in types:
            ok = t in doc[path] or (t == "list[]" and any(d.startswith("list[") for d in doc[path])) \
                or (t.startswith("list[") and any(d.startswith("list[") and
                                                  set(t[5:-1].split("|")) <= set(d[5:-1].split("|"))
                                                  for d in doc[path]))
            assert ok, f"{path}: {t} not in {doc[path]}"


def test_snapshot_mode_json_has_exactly_the_documented_fields_and_types():
    doc = documented("DOCTOR.md", "### Snapshot mode")
    snap, keep = _midrun()
    two = _merge([_device_run(0, "1GiB", False), _device_run(1, "1GiB", True)], traced=(1,))
    untraced = _merge([_device_run(0, "1GiB", False), _device_run(1, "1GiB", False)], traced=())
    reports = [gml.doctor(str(KIT)), gml.doctor(str(KIT), budget_s=0),
               gml.doctor(snap, total_memory="9GiB"), gml.doctor(snap, total_memory="3GiB"),
               gml.doctor(snap), gml.doctor(two, search=False),
               gml.doctor(untraced, request="50MiB"), gml.doctor(untraced),
               gml.doctor(_pinned_and_out_of_memory(), search=False)]
    seen = {}
    for d in reports:
        out = json.loads(d.json())
        assert list(out)[0] == "schema_version" and out["schema_version"] == 1
        assert out["kind"] is not None
        observed(out, out=seen)
    check(seen, doc)
    del keep


def _pinned_and_out_of_memory():
    """A device OOM in a run that pinned 20.4 MiB (details.host filled in)."""
    gpu = gml.SimulatedGPU("1GiB", record_pinned_host_memory=True)
    gpu.keep = [gpu.pin(int(20.4 * 2**20)), gpu.empty(300 * 2**20)]
    with pytest.raises(gml.OutOfMemoryError):
        gpu.empty(900 * 2**20)
    return gpu.snapshot()


def test_growth_json_has_exactly_the_documented_fields_and_types():
    pytest.importorskip("torch")
    from gpumemlab.lessons import growth_cases as cases
    doc = documented("GROWTH.md", "## JSON schema")
    seen = {}
    for rec, kw in ((cases.predictions_kept(steps=3), {}), (cases.new_shapes(), {}),
                    (cases.optimizer_state(steps=3), {"iterations": "auto"}),
                    (_bounded_history(), {})):
        out = json.loads(gml.growth(rec, **kw).json())
        assert list(out)[0] == "schema_version" and out["schema_version"] == 1
        observed(out, out=seen)
    check(seen, doc)


def _bounded_history(steps=6):
    """A loop without marks that keeps its last two outputs: bytes carried, not kept."""
    import collections
    from gpumemlab.lessons import growth_cases as cases
    model = cases.mlp()
    with gml.capture(model) as rec:
        last = collections.deque(maxlen=2)
        for i in range(steps):
            x, _y = cases._batch(i, 256, 256, 256)
            last.append(model(x).detach())
        last.clear()
        del x, _y
    assert not any(e.get("user_metadata") for e in rec.trace)
    return rec
