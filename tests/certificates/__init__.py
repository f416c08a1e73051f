"""Tests of gpumemlab.certificates: signed course certificates and their pages."""
