"""What each problem set's test cells check in your kernel, one module per set.

A test cell calls its question's function here, ``qN_tests(t, ...)``, with its record ``t``
(``learner/testcell.py``): the function runs the question's visible checks (the worked examples)
on your code and returns the helpers the grader's hidden cases reuse. So a test cell is a few lines,
and a failing one shows its one-line verdict, not 40 lines of checks. The grader runs the same
function in its own process, with your recorded results standing in for your code, and then checks
your kernel never receives.
"""
