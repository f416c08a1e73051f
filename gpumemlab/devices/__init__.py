"""Devices: one ``torch.cuda``-shaped interface over two kinds of GPU memory.

``SimulatedGPU`` (``simulated``) drives the allocator model; ``CudaGPU`` and ``gml.device()``
(``cuda``) use real ``torch.cuda`` memory when there is a CUDA device. ``scenarios`` holds the
lessons' workloads, which run on either. Importing this package imports none of its modules.
"""
