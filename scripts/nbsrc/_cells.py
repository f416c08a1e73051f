"""Cell helpers shared by the notebook sources: ``md``, ``code`` and the common first cell."""
from __future__ import annotations

import textwrap


def md(text: str) -> tuple:
    return ("markdown", textwrap.dedent(text).strip("\n"))


def code(text: str) -> tuple:
    return ("code", textwrap.dedent(text).strip("\n"))


# Every notebook starts with this cell: import the kit (also from a clone that was never
# pip-installed), draw figures inline, and say which device the lesson runs on.
_SETUP = '''
# Which device does this notebook run on?
try:
    import gpumemlab as gml
except ImportError:  # a clone without `pip install -e .`: use the package next to notebooks/
    import pathlib, sys
    sys.path.insert(0, str(pathlib.Path.cwd().parent))
    import gpumemlab as gml
%matplotlib inline
{extra}gpu = {device}
print(gpu.describe())
print("real GPU" if gpu.kind == "cuda" else "simulated GPU (no CUDA device here, or GPUMEMLAB_DEVICE=sim)")
'''

# gml.device() picks a CudaGPU when CUDA is there, else a SimulatedGPU.
DEVICE_EXPR = "gml.device()"


def setup(extra: str = "") -> tuple:
    """The first code cell; ``extra`` lines (imports) go before the device is made."""
    body = _SETUP.format(extra=textwrap.dedent(extra).strip() + "\n" if extra.strip() else "",
                         device=DEVICE_EXPR)
    return code(body)


def quiz(nb: str) -> tuple:
    return code(f'gml.quiz("{nb}")')
