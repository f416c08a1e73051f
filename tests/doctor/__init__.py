"""Tests of gpumemlab.doctor: the OOM message doctor, snapshot mode and gml.growth."""
