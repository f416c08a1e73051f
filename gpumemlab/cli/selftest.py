"""``gpumemlab selftest``: every lesson scenario on the simulator and, with CUDA, on the real card.

Exit status 0 when every scenario tells its lesson's story on the simulator and every compared
one is equal on the card; 1 otherwise; 2 for a request that cannot run (``--device cuda``
without CUDA, a budget larger than the card).
"""
from __future__ import annotations

import json

from gpumemlab.cli.progress import add_quiet, ticker
from gpumemlab.units import format_size, parse_size


def register(sub) -> None:
    p = sub.add_parser("selftest", help="run every lesson scenario on the simulator and, with "
                       "CUDA, on the real GPU, and compare them",
                       description="Every lesson scenario on the simulator and, with CUDA, on "
                                   "the real card, compared. Exit status 0 when every scenario "
                                   "tells its lesson's story and every compared one is equal; 1 "
                                   "otherwise; 2 for a request that cannot run.")
    p.add_argument("--device", choices=("auto", "sim", "cuda"), default="auto",
                   help="auto (default): compare with the real GPU when CUDA is available")
    p.add_argument("--budget", default="2GiB",
                   help="memory per scenario (the simulated card's size and the real GPU's cap)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="run only these scenarios")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_quiet(p)
    p.set_defaults(func=run)


def _cuda_total():
    """The first CUDA device's memory, or None without CUDA."""
    try:
        import torch
    except Exception:
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(0).total_memory)


def run(args) -> int:
    from gpumemlab.cli import CLIError
    from gpumemlab.lessons import selftest as st
    from gpumemlab.devices.budget import BudgetError, decide_budget
    try:
        budget = parse_size(args.budget, name="--budget")
        if budget < st.MIN_BUDGET:
            raise ValueError(f"--budget {format_size(budget)} is too small: the scenarios need "
                             f"at least {format_size(st.MIN_BUDGET)}")
        names = args.only
        if names:
            for n in names:
                st.by_name(n)
    except (ValueError, KeyError) as exc:
        raise CLIError(str(exc).strip("'\"")) from None
    device = args.device
    if device != "sim":
        total = _cuda_total()
        if total is None:
            if device == "cuda":
                raise CLIError("--device cuda: no CUDA device here (torch.cuda.is_available() "
                               "is False); run with --device sim")
            device = "sim"
        else:
            try:
                decide_budget(budget, total, total)   # only the card's size: refuse, or go on
            except BudgetError as exc:
                raise CLIError(str(exc)) from None
            device = "cuda"
    with ticker(args, f"selftest: {len(names or st.SCENARIOS)} scenarios on {device}"):
        report = st.selftest(device, budget, names)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(_text(report, budget))
    return st.exit_status(report)


def _text(report, budget) -> str:
    lines = [f"device: {report['device']}; torch {report['torch']}"]
    if not report["cuda"]:
        lines.append(f"no comparison with a real GPU (CUDA not used); every scenario ran on a "
                     f"{format_size(budget)} simulated card")
    for s in report["scenarios"]:
        sim = "ok" if s["simulated_ok"] else "FAILED"
        real = ("equal" if s["equal"] else "DIFFERENT") if s["compared"] else "not compared"
        lines.append(f"  {s['name']:26} simulator {sim:6}  GPU {real}")
        lines += [f"      {d}" for d in s["differences"]]
    n = len(report["scenarios"])
    good = sum(1 for s in report["scenarios"] if s["simulated_ok"])
    lines.append(f"{good} of {n} scenarios ran on the simulator as their lesson says")
    if report["cuda"]:
        eq = sum(1 for s in report["scenarios"] if s["compared"] and s["equal"])
        lines.append(f"{eq} of {n} compared equal on the real GPU")
    return "\n".join(lines)
