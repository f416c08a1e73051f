"""Packaging beyond what pyproject.toml can say: the question banks.

The banks live in ``quizzes/`` at the top of the checkout (the kit's layout: one YAML file per
notebook, beside ``notebooks/``). A wheel carries them as the data-only package
``gpumemlab.quizkit.banks``, so an installed gpumemlab finds them too
(``gpumemlab.quizkit.bank.quizzes_dir``). pyproject.toml cannot add a mapped package to the ones
``packages.find`` discovers, hence this file; everything else is in pyproject.toml.
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["gpumemlab", "gpumemlab.*"]) + ["gpumemlab.quizkit.banks"],
    package_dir={"gpumemlab.quizkit.banks": "quizzes"},
)
