"""Tests of gpumemlab.cli: the command line, the README's minute and the lab's working copies."""
