"""The instructor's side of grading: everything that decides a score, run by the trusted grader only.

One protocol (``course/protocol.py``) in three stages, each a subpackage, with a thin orchestrator on top
(``autograde_class.py``; the command line is ``course/__main__.py``):

- ``intake``: downloads in (``collect_notebooks``, Canvas's zip and roster in ``lms_canvas``), cleaning
  (``notebook_cleaning``), each learner's key (``variant_keys``), what an answer cell reaches for
  (``answer_scan``), and readying one submission (``prepare_submission``);
- ``grading``: the pool of warm workers (``worker_pool``, ``grading_worker``), each notebook's job
  (``grading_job``) and limits (``grading_limits``), nbgrader's hooks (``nbgrader_hooks``), the sandbox
  (``kernel_sandbox``, ``memory_cgroup``, ``sandbox_denials``) and the judge (``judge``, ``judged_records``);
- ``reporting``: copy detection (``copy_detection``: answers right for another learner's numbers;
  ``similar_answers``: answer code shared by pairs), feedback (``learner_feedback``), ``grades_export``,
  ``canvas_grades``, ``class_report`` and the class's predictions (``prediction_records``,
  ``prediction_report``).

Below them: ``notebook_result`` (the one result per graded notebook that every stage adds to, written once
when the class is graded) over ``course_layout`` (folders, nbgrader, settings). A later stage may
import an earlier one, never the reverse. Learner kernels never import this package: the sandbox's copy
of the library leaves it out.
"""
