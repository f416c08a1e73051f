"""What the lessons own: each lesson's exercise (its task, hints and judge, registered with
``quizkit``'s exercise machinery), its selftest workload and the models and loops it studies.
A lesson's author finds everything in ``notebooks/src/NN_topic.py`` plus its module here:

* ``why_a_cache`` (01), ``fragmentation`` (02), ``reading_the_evidence`` (03), ``empty_cache`` (04),
  ``allocator_settings`` (05), ``expandable_segments`` (06), ``activations`` (07, with its model
  ``tiny_lm``), ``paged_kv_cache`` (08), ``diagnose_your_run`` (09, with ``training_run``, the torch loop
  that made its recording in ``data/``), ``memory_that_grows`` (10, with its
  real torch loops ``growth_cases``), ``allocation_order`` (12), ``pools_and_graphs`` (13),
  ``streams`` (14), ``serving_memory`` (15), ``will_it_fit`` (16: its
  exercise, judged by the planner, and its questions; the planner itself is
  ``gpumemlab.planner``), ``memory_beyond_the_gpu`` (17: pinned host memory and offload);
* ``capture_demo``: a small transformer and training step to capture on the CPU;
* ``selftest`` (and its child process ``selftest_worker``): every lesson's workload on the model
  and, with CUDA, on the real card, compared; ``experiment`` (``gml.experiment``): one of them on
  the learner's own device beside the model's prediction.

Importing this package registers every lesson's exercise and predict questions (their unit,
tolerance and misconceptions: ``quizkit.predict_rules``), so ``predict`` and ``reveal``
(``gml.predict``, ``gml.reveal``) read a prediction in its question's unit in any kernel, and
``get``, ``all_exercises``, ``judge`` and ``judge_json`` (``quizkit.lesson_exercises``'s,
re-exported) and ``exercise`` (``gml.exercise``) know them all. The lessons' models
(``tiny_lm``, ``growth_cases``) are imported only when used (torch itself comes in with the
simulated GPU's OutOfMemoryError, which subclasses torch's).
"""
from __future__ import annotations

from gpumemlab.quizkit import exercise, predict, reveal
from gpumemlab.quizkit.lesson_exercises import all_exercises, get, judge, judge_json
from . import (activations, allocation_order, allocator_settings, diagnose_your_run,  # noqa: F401
               empty_cache, expandable_segments, fragmentation, memory_beyond_the_gpu,
               memory_that_grows,
               paged_kv_cache, pools_and_graphs, reading_the_evidence, serving_memory,
               streams, why_a_cache, will_it_fit)

__all__ = ["exercise", "predict", "reveal", "get", "all_exercises", "judge", "judge_json"]
