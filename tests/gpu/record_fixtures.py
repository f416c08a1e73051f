"""On a CUDA machine: record every selftest scenario's real snapshot as a fixture.

    PYTHONPATH=. python3 tests/gpu/record_fixtures.py [--out DIR] [--budget 2GiB]

Each scenario runs in a fresh child process on a CudaGPU of the budget (its allocator settings
in PYTORCH_CUDA_ALLOC_CONF, as ``gpumemlab selftest`` runs it) and its snapshot, taken before the
scenario frees its tensors, is written to DIR/cuda_NAME.pickle (default
tests/fixtures/snapshots/), Python stack frames dropped (see selftest_worker). DIR/cuda_fixtures.json
says how each was made (budget, settings, torch, card). Each recording is then replayed on the
model; ``--on-model`` makes the same recordings on the simulator (a dry run for a machine
without CUDA). The script prints one line per scenario and exits 1 if any failed or did not replay with
0 address mismatches. tests/recordings/test_real_fixtures.py replays the committed ones.
"""
import argparse
import json
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root))

from gpumemlab.lessons import selftest as st  # noqa: E402
from gpumemlab.recordings.files import load_snapshot  # noqa: E402
from gpumemlab.recordings.replay import replay  # noqa: E402
from gpumemlab.units import format_size, parse_size  # noqa: E402

MANIFEST = "cuda_fixtures.json"


def _card() -> dict:
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("record_fixtures.py: no CUDA device (torch.cuda.is_available() is False)")
    props = torch.cuda.get_device_properties(0)
    return {"torch": torch.__version__, "card": props.name,
            "card_total_memory": int(props.total_memory)}


def replay_fixture(path: Path, budget: int):
    """Replay one recording on the model of a ``budget``-byte card (the cap it ran under)."""
    return replay(load_snapshot(path), total_memory=budget, stop_on_oom=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=root / "tests" / "fixtures" / "snapshots")
    parser.add_argument("--budget", default="2GiB")
    parser.add_argument("--only", nargs="+", metavar="NAME")
    parser.add_argument("--on-model", action="store_true",
                        help="a dry run without a GPU: the same children on the simulator")
    args = parser.parse_args(argv)
    budget = parse_size(args.budget, name="--budget")
    device = "sim" if args.on_model else "cuda"
    card = ({"torch": "", "card": "the simulator (--on-model dry run)", "card_total_memory": budget}
            if args.on_model else _card())
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [st.by_name(n) for n in args.only] if args.only else st.SCENARIOS
    manifest, failed = {"budget": budget, **card, "scenarios": {}}, 0
    for sc in chosen:
        path = args.out / f"cuda_{sc.name}.pickle"
        measured = st.run_on_cuda(sc, budget, snapshot_path=path, device=device)
        if measured.get("error"):
            failed += 1
            print(f"{sc.name:26} FAILED: {measured['error']}")
            continue
        result = replay_fixture(path, budget)
        good = result.address_mismatches == 0 and result.reproduced
        failed += not good
        manifest["scenarios"][sc.name] = {"file": path.name, "alloc_conf": sc.conf(budget),
                                          "steps": len(measured["steps"]),
                                          "oom_step": measured["oom_step"]}
        print(f"{sc.name:26} {path.stat().st_size:>8} bytes, {len(measured['steps'])} steps; "
              f"replay: {result.address_mismatches} address mismatches"
              f"{'' if good else ', NOT reproduced'}")
    (args.out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"{len(chosen) - failed} of {len(chosen)} recorded and replayed exactly "
          f"({format_size(budget)} budget on {card['card']}, torch {card['torch']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
