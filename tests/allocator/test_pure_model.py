"""The allocator package imports only the standard library: it works with torch, matplotlib,
ipywidgets, numpy and IPython unavailable, and importing gpumemlab imports none of them."""
import subprocess
import sys
import textwrap


def run(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)


def test_allocator_imports_with_heavy_modules_blocked():
    result = run("""
        import sys
        for name in ("torch", "matplotlib", "ipywidgets", "numpy", "IPython"):
            sys.modules[name] = None  # any import of these now raises ImportError
        from gpumemlab.allocator import DeviceCachingAllocator
        a = DeviceCachingAllocator(2**30)
        b = a.malloc(123)
        size = b.size
        a.free(b)
        a.check_invariants()
        print("ok", size)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "512"]


def test_import_has_no_side_effects():
    result = run("""
        import sys
        import gpumemlab
        heavy = [m for m in ("torch", "matplotlib", "ipywidgets", "numpy") if m in sys.modules]
        print(heavy)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_allocator_source_imports_only_stdlib():
    import ast
    import pathlib

    import gpumemlab.allocator as pkg

    stdlib = set(sys.stdlib_module_names)
    for path in pathlib.Path(pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in stdlib, f"{path.name} imports {name}"
