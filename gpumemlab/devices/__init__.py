"""Devices: one ``torch.cuda``-shaped interface over two kinds of GPU memory.

``SimulatedGPU`` (``simulated``) drives the allocator model; ``CudaGPU`` and ``gml.device()``
(``cuda``) use real ``torch.cuda`` memory when there is a CUDA device, within a budget
(``budget``). ``scenarios`` and ``lesson_scenarios`` hold the lessons' workloads, which run on
either; ``selftest`` (with ``selftest_worker`` and ``compare``) runs them on both and compares,
and ``experiment`` is the lessons' one-cell version. Importing this package imports none of its
modules.
"""
