"""The pre-flight planner: will a model's step fit on a card, at what batch, with which levers.

``gml.plan(model, optimizer, inputs, total_memory=...)`` (``plan.py``) traces the step on fake
tensors at full size (``trace.py``, over ``gml.capture(fake=...)``), replays it on the allocator
model and searches batch, card, levers and allocator settings, each by replay; ``crosscheck.py``
computes the rules of thumb beside it; ``script.py`` runs an unmodified script on fake CUDA tensors
with ``torch.cuda`` answering from the simulated card (``gpumemlab plan``); ``models.py`` builds a
GPT-style model in code. Importing this package imports none of its modules.
"""
