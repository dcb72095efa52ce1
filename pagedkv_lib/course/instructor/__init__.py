"""The instructor's side of grading: everything that decides a score, run by the trusted grader only.

``grade`` and ``classrun`` (autograding a class with nbgrader), ``worker`` (warm grading processes),
``sandbox`` (bubblewrap around every student kernel) and ``denials`` (what it denied, from strace),
``events`` (what the sandbox and hooks report to the grader), ``judge`` (scoring test cells' records
outside the kernel), ``nbhooks`` (nbgrader preprocessors), ``nbclean``, ``intake`` and ``canvas``
(downloads in, Canvas's gradebook out), ``scan`` and ``flags`` (what the instructor should look at),
``feedback_html``, ``class_report``, ``predictions``, ``prediction_report`` and ``workflow``
(feedback, grades, the report and the class's predictions).
Learner kernels never import this package: the sandbox's copy of the library leaves it out.
"""
