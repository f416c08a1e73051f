"""environment.yml installs the package from pyproject.toml (so the two never drift), and the
README's two commands are the ones the kit and CI use."""
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


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


def test_torch_range_admits_2_13():
    pyproject = (ROOT / "pyproject.toml").read_text()
    spec = re.search(r'"torch([^"]*)"', pyproject).group(1)
    from packaging.specifiers import SpecifierSet
    assert "2.13.0" in SpecifierSet(spec)


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./kit test" in readme and "./kit lab" in readme
    assert "./kit test" in ci
    assert "set -euo pipefail" in ci
