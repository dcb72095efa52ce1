"""The instructor's side of grading: everything that decides a score, run by the trusted grader only.

``grade`` and ``classrun`` (autograding a class with nbgrader), ``sandbox`` (bubblewrap around every
student kernel), ``judge`` (scoring test cells' records outside the kernel), ``nbhooks`` (nbgrader
preprocessors), ``nbclean`` and ``intake`` (downloads in), ``scan`` and ``flags`` (what the instructor
should look at), ``feedback_html``, ``class_report`` and ``workflow`` (feedback, grades, the report).
Learner kernels never import this package: the sandbox's copy of the library leaves it out.
"""
