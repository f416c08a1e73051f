"""Devices: one ``torch.cuda``-shaped interface over two kinds of GPU memory.

``SimulatedGPU`` (``simulated``) drives the allocator model; ``CudaGPU`` and ``gml.device()``
(``cuda``) use real ``torch.cuda`` memory when there is a CUDA device, within a budget
(``budget``). ``scenarios`` holds seeded workloads (and the ``ScenarioRun`` recorder the lessons'
own workloads use), which run on either; ``compare`` compares one workload's steps on both.
The lessons' workloads, ``selftest`` and ``gml.experiment`` live in ``gpumemlab.lessons``.
Importing this package imports none of its modules.
"""
