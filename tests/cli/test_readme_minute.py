"""The README's "library in a minute" runs as written, top to bottom, in a fresh interpreter, and
the values its comments give (``# (512, 2097152): ...``) are what the lines compute."""
import ast
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Runs the block one top-level statement at a time; an expression whose comment opens with a
# Python literal is checked against it. Prints one JSON line of what it checked.
DRIVER = r"""
import ast, io, json, sys, tokenize
src = sys.stdin.read()
comments = {t.start[0]: t.string[1:].strip()
            for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.COMMENT}
scope, checked = {"__name__": "__main__"}, []
for node in ast.parse(src).body:
    code = compile(ast.Module([node], []), "README.md", "exec")
    if isinstance(node, ast.Expr):
        value = eval(compile(ast.Expression(node.value), "README.md", "eval"), scope)
        claim = comments.get(node.lineno, "").split(":")[0]
        try:
            want = ast.literal_eval(claim)
        except (ValueError, SyntaxError):
            continue
        checked.append([ast.get_source_segment(src, node), repr(value), repr(want)])
    else:
        exec(code, scope)
print("CHECKED " + json.dumps(checked))
"""


def minute_block() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The library in a minute", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section holds one python block"
    return blocks[0]


def test_the_block_names_no_placeholder():
    """Every name the block uses is defined in it or by Python (no ``recording``, no
    ``"oom.pickle"``, no ``make_model`` to fill in)."""
    tree = ast.parse(minute_block())
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    bound |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
              for a in n.names}
    bound |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.Lambda) for a in n.args.args}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    import builtins
    assert used - bound - set(dir(builtins)) == set()
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert not [s for s in strings if s.endswith((".pickle", ".json"))], "no file the reader lacks"


@pytest.mark.slow
def test_the_library_in_a_minute_runs_top_to_bottom(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1", HOME=str(tmp_path),
               GPUMEMLAB_DEVICE="sim", PYTHONPATH=str(ROOT))
    run = subprocess.run([sys.executable, "-c", DRIVER], input=minute_block(), text=True,
                         capture_output=True, cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    checked = json.loads(run.stdout.rsplit("CHECKED ", 1)[1])
    assert checked, "the block's comment claims a value for at least one line"
    for line, got, want in checked:
        assert got == want, f"README: {line} gives {got}, its comment says {want}"
    out = run.stdout
    assert "PyTorch CUDA memory summary" in out
    assert out.count("leak") >= 4                     # growth: each of the 4 steps keeps 500 MiB
    assert "kind: exhaustion" in out                  # the doctor on the OOM the block makes
    assert re.search(r"<Plan batch 1: peak reserved .* on 24\.00 GiB: fits>", out)
