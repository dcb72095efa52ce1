"""nbgrader configuration for the pagedkv course (run nbgrader from the repository root).

Instructor copies with solutions and hidden tests live in solutions/<assignment>/; the student
copies nbgrader generates from them live in exercises/<assignment>/ and are committed. The class
workflow around nbgrader (collect, parallel autograde, status, report) is `python -m pagedkv_lib.course`.
"""
import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "pagedkv"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
# One gradebook, beside this file, wherever nbgrader starts: formgrader's server on a hub starts in the
# instructor's home, `make autograde` in the course; a relative path would give each its own.
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(os.path.dirname(os.path.realpath(__file__)), "gradebook.db")
# Test cells' judging runs outside the learner's kernel; the release carries no grader-only file.

# Student notebooks keep no outputs; a stub is what learners replace.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Per-cell limit in seconds: every cell of a problem set runs in well under a second, so 30 s only
# stops loops. `python -m pagedkv_lib.course autograde --timeout N` overrides it.
c.Execute.timeout = 30
# A loop that ignores the interrupt is given up on after this many seconds of silence from the kernel.
c.Execute.iopub_timeout = 4

# Autograde: nbgrader's pipelines with the course's hooks (pagedkv_lib/course/instructor/grading/nbgrader_hooks.py):
# - QuietOverwriteCells warns only about locked cells a learner edited, not about hidden-test checksums;
# - GuardedExecute runs the kernel in a sandbox (instructor/grading/kernel_sandbox.py), sends test cells without their
#   grader-only parts, and survives a dead kernel or an uninterruptible loop (that question scores 0,
#   a fresh kernel replays the cells before it, the rest is graded);
# - CapOutput keeps at most 20 kB of output per cell (nbgrader's LimitOutput counts lines, not bytes);
# - JudgeTests scores each test cell from its record of results, in this process (instructor/grading/judge.py).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "pagedkv_lib.course.instructor.grading.nbgrader_hooks.QuietOverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.Autograde.autograde_preprocessors = [
    "pagedkv_lib.course.instructor.grading.nbgrader_hooks.GuardedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "pagedkv_lib.course.instructor.grading.nbgrader_hooks.CapOutput",
    "nbgrader.preprocessors.LimitOutput",
    "pagedkv_lib.course.instructor.grading.nbgrader_hooks.JudgeTests",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
    # after grading: autograded/ holds no hidden-test source, not even quoted in a traceback
    "pagedkv_lib.course.instructor.grading.nbgrader_hooks.ClearHiddenTestSource",
    "pagedkv_lib.course.instructor.reporting.learner_feedback.ConciseErrors",
]
c.CapOutput.max_bytes = 20_000
# Grading limits, each a setting with help text (pagedkv_lib/course/instructor/grading/grading_limits.py and
# intake/submission_bounds.py); the defaults hold for this course, for example:
# c.KernelLimits.disk_bytes = 256 * 2**20      # each kernel's home and /tmp together (a tmpfs)
# c.NotebookLimits.budget_seconds = 600        # most worker time one notebook may use
# c.SubmissionLimits.json_depth = 100          # most JSON nesting a handed-in notebook may have
# A deleted test cell is put back from the gradebook and run, so deleting a test gains nothing
# (QuietOverwriteCells places it after the nearest earlier cell the submission still has).
c.QuietOverwriteCells.add_missing_cells = True

# Feedback goes to learners: drop hidden test source, cut tracebacks (which quote hidden test lines)
# down to the message check_value wrote for them, and show math as text (no MathJax from a CDN).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "pagedkv_lib.course.instructor.grading.nbgrader_hooks.ClearHiddenTestSource",
    "pagedkv_lib.course.instructor.reporting.learner_feedback.ConciseErrors",
    "pagedkv_lib.course.instructor.reporting.learner_feedback.PlainMath",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# A hand-in is shown to the instructor as HTML on their own server (formgrader's manual grading) and to the
# learner as feedback, both made by nbconvert's HTMLExporter: none of the learner's script may run there, since
# it would act with the instructor's cookies (issue 37). sanitize_html alone leaves nbgrader's markdown cells and
# an image's width/height raw; pagedkv_lib/course/instructor/reporting/safe_html.py says what each line closes.
_SAFE = "pagedkv_lib.course.instructor.reporting.safe_html."
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"clean_html": _SAFE + "clean_html", "strip_files_prefix": _SAFE + "clean_markdown_html"}
c.HTMLExporter.preprocessors = [_SAFE + "PlainImageSizes"]
