"""environment.yml installs the package from pyproject.toml (so the two never drift), the
README's two commands are the ones the kit and CI use, and a wheel built from the checkout works
on its own (quiz banks and command line included)."""
import os
import pathlib
import re
import shutil
import site
import subprocess
import sys
import zipfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_environment_installs_this_checkout_from_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert pip_sections, "environment.yml needs a pip section"
    assert any(re.fullmatch(r"-e \.(\[[a-z,]+\])?", line) for line in pip_sections[0])
    assert "pip" in env["dependencies"]
    python = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'requires-python = ">=3.10"' in pyproject
    assert python and ">=3.10" in python[0]
    # No package is pinned in both places: dependencies live in pyproject.toml only.
    conda_names = {re.split(r"[<>=!]", d)[0] for d in env["dependencies"] if isinstance(d, str)}
    assert conda_names <= {"python", "pip"}


def _torch_spec(text):
    return re.search(r'"torch([^"]*)"', text).group(1)


def test_torch_range_admits_every_torch_from_2_1_with_no_upper_cap():
    """A learner who already has a newer torch (2.15.0 came out in October 2026) can install the
    kit: the range has a floor and no ceiling, and ./kit's fallback install asks for the same."""
    from packaging.specifiers import SpecifierSet
    spec = SpecifierSet(_torch_spec((ROOT / "pyproject.toml").read_text()))
    assert {s.operator for s in spec} == {">="}, f"torch{spec}: an upper cap or a pin"
    for version in ("2.1.0", "2.13.0", "2.13.0+cpu", "2.14.1", "2.15.0", "3.0.0"):
        assert spec.contains(version), version
    assert not spec.contains("2.0.1")
    fallback = re.search(r'install "torch==2\.13\.0" \|\| install "torch([^"]*)"',
                         (ROOT / "kit").read_text())
    assert fallback and SpecifierSet(fallback.group(1)) == spec


def test_environment_takes_torch_from_the_cpu_index():
    """Binder builds environment.yml and has no GPU: pip must see PyTorch's CPU-only wheels
    before it installs the checkout (and torch with it), or it downloads a CUDA build of GBs."""
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    cpu_index = r"--extra-index-url[ =]https://download\.pytorch\.org/whl/cpu/?"
    index = [i for i, line in enumerate(pip) if re.fullmatch(cpu_index, line)]
    install = [i for i, line in enumerate(pip) if line.startswith("-e ")]
    assert index and install and index[0] < install[0], pip


def test_the_kits_install_stamp_covers_every_packaging_file():
    """./kit reinstalls when the stamp (a hash of the packaging files) changes; setup.py says which
    packages and data a build holds, so editing it must reinstall too."""
    want = next(line for line in (ROOT / "kit").read_text().splitlines() if "want=" in line)
    for name in ("pyproject.toml", "setup.py", "environment.yml"):
        assert (ROOT / name).is_file() and name in want, name


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./kit test" in readme and "./kit lab" in readme
    assert "./kit test" in ci
    assert "set -euo pipefail" in ci


# Files a wheel is built from (as in a clean clone); copied so the build's build/ and egg-info
# never land in the checkout.
_BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "gpumemlab", "quizzes",
                 "notebooks")


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _copy_checkout(dest):
    dest.mkdir()
    for name in _BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, dest / name)
    return dest


def _fresh_venv(where, *install_args):
    """A new venv holding only what ``install_args`` installs (with this interpreter's pip, before
    any other site-packages are visible); then a .pth lends it this environment's torch & co."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)])
    vpy = where / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(vpy), "install", "--no-deps", "--no-index",
          "--no-build-isolation", "-q", *install_args])
    vsite = pathlib.Path(_run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())
    (vsite / "zz_borrowed_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return vpy, vsite


def _outside_env(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUMEMLAB_QUIZZES")}
    env.update(GPUMEMLAB_HEADLESS="1", MPLBACKEND="Agg", HOME=str(tmp_path))
    return elsewhere, env


_QUIZ_02 = ("import gpumemlab as gml, gpumemlab.quizkit.bank as b; "
            "print(gml.__file__); print(b.quizzes_dir()); gml.quiz('02')")


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_has_the_quizzes_and_the_cli(tmp_path):
    src = _copy_checkout(tmp_path / "src")
    # the build itself, as pip runs it, says nothing to warn about (no "package absent from the
    # packages configuration" for a data folder)
    build = subprocess.run([sys.executable, "-c", "import sys, setuptools.build_meta as b; "
                            "b.build_wheel(sys.argv[1])", str(tmp_path / "dist")], cwd=src,
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    warned = [line for line in (build.stdout + build.stderr).splitlines()
              if "Warning" in line or "is absent from the `packages`" in line]
    assert not warned, warned
    wheel, = (tmp_path / "dist").glob("gpumemlab-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        banks = sorted(n for n in names if n.startswith("gpumemlab/quizkit/banks/"))
        # lesson 09 diagnoses this recording when the learner has none of their own
        assert "gpumemlab/lessons/data/training_run.pickle" in names
        # gml.player's browser block map loads its JavaScript from the package, never the web
        # (the three files canvas_widget.PARTS joins into one module)
        assert {f"gpumemlab/viz/{part}" for part in
                ("canvas_data.js", "canvas_timeline.js", "canvas_player.js")} <= set(names)
        lessons = sorted(n.rsplit("/", 1)[1] for n in names
                         if n.startswith("gpumemlab/lessons/notebooks/"))
        assert lessons == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
        assert {"gpumemlab/classroom/example/fragmentation_lab.ipynb",
                "gpumemlab/classroom/example/roster.csv"} <= set(names)
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
        assert "BSD 3-Clause" in zf.read(next(n for n in names if n.endswith("licenses/LICENSE"))).decode()
    assert [n.rsplit("/", 1)[1] for n in banks] == sorted(p.name for p in (ROOT / "quizzes").glob("*.yaml"))

    vpy, vsite = _fresh_venv(tmp_path / "venv", str(wheel))
    elsewhere, env = _outside_env(tmp_path)
    out = _run([str(vpy), "-c", _QUIZ_02], cwd=elsewhere, env=env)
    module_file, banks_dir = out.splitlines()[:2]
    assert module_file.startswith(str(vsite)), module_file      # the installed copy, not the checkout
    assert pathlib.Path(banks_dir) == vsite / "gpumemlab" / "quizkit" / "banks"
    assert "Quiz 02:" in out and "02.1" in out
    cli = vpy.parent / "gpumemlab"
    assert "assign" in _run([str(cli), "--help"], cwd=elsewhere, env=env)
    assert "usage: gpumemlab assign" in _run([str(cli), "assign", "--help"], cwd=elsewhere, env=env)
    # a pip user's lessons and example assignment come out of the installed package
    said = _run([str(cli), "lessons", "mine"], cwd=elsewhere, env=env)
    copied = sorted(p.name for p in (elsewhere / "mine").glob("*.ipynb"))
    assert copied == lessons and f"{len(lessons)} copied" in said and "jupyter lab mine" in said
    _run([str(cli), "course", "example", "course"], cwd=elsewhere, env=env)
    assert (elsewhere / "course" / "fragmentation_lab.ipynb").read_bytes() == \
        (ROOT / "gpumemlab" / "classroom" / "example" / "fragmentation_lab.ipynb").read_bytes()


@pytest.mark.slow
def test_an_editable_install_reads_the_checkouts_quizzes(tmp_path):
    src = _copy_checkout(tmp_path / "src")
    # pip install -e, as ./kit runs it, in two steps: the backend builds the editable wheel here
    # (the fresh venv has no setuptools), then it goes into the venv.
    _run([sys.executable, "-c", "import sys, setuptools.build_meta as b; b.build_editable(sys.argv[1])",
          str(tmp_path / "dist")], cwd=src)
    wheel, = (tmp_path / "dist").glob("gpumemlab-*.whl")
    vpy, _ = _fresh_venv(tmp_path / "venv", str(wheel))
    elsewhere, env = _outside_env(tmp_path)
    out = _run([str(vpy), "-c", _QUIZ_02], cwd=elsewhere, env=env)
    module_file, banks_dir = out.splitlines()[:2]
    assert module_file == str(src / "gpumemlab" / "__init__.py")
    assert pathlib.Path(banks_dir) == src / "quizzes"
    assert "Quiz 02:" in out

