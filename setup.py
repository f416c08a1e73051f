"""Packaging beyond what pyproject.toml can say: the data-only packages.

* The question banks live in ``quizzes/`` at the top of the checkout (the kit's layout: one YAML
  file per notebook, beside ``notebooks/``). A wheel carries them as ``gpumemlab.quizkit.banks``,
  so an installed gpumemlab finds them too (``gpumemlab.quizkit.bank.quizzes_dir``).
* The lesson notebooks, ``notebooks/*.ipynb``, go in as ``gpumemlab.lessons.notebooks``, for
  ``gpumemlab lessons DIR`` to copy out (``gpumemlab.cli.workcopy.lessons_source``); their
  jupytext sources (``notebooks/src``) stay in the checkout.
* ``gpumemlab.lessons.data`` (lesson 09's recording) and ``gpumemlab.classroom.example`` (the
  example assignment ``gpumemlab course example`` writes) are folders without ``__init__.py``,
  named here so that setuptools packages them without a warning.

pyproject.toml cannot add mapped packages to the ones ``packages.find`` discovers, hence this
file; everything else is in pyproject.toml.
"""
from pathlib import Path

from setuptools import find_packages, setup

DATA_PACKAGES = ["gpumemlab.quizkit.banks", "gpumemlab.lessons.data", "gpumemlab.classroom.example"]
MAPPED = {"gpumemlab.quizkit.banks": "quizzes"}
# The grader's own wheel (gpumemlab gradescope) is built from the package and its banks alone:
# it needs no lessons, so a build without notebooks/ leaves them out.
if (Path(__file__).resolve().parent / "notebooks").is_dir():
    DATA_PACKAGES.append("gpumemlab.lessons.notebooks")
    MAPPED["gpumemlab.lessons.notebooks"] = "notebooks"

setup(
    packages=find_packages(include=["gpumemlab", "gpumemlab.*"]) + DATA_PACKAGES,
    package_dir=MAPPED,
)
