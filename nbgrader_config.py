"""nbgrader configuration for the pagedkv course (run nbgrader from the repository root).

Instructor copies with solutions and hidden tests live in solutions/<assignment>/; the student
copies nbgrader generates from them live in exercises/<assignment>/ and are committed.
"""
c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.course_id = "pagedkv"
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# Student notebooks keep no outputs; a stub is what learners replace.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# A learner's long-running cell should not hang autograding forever.
c.ExecutePreprocessor.timeout = 300

# Feedback goes to learners: drop hidden test source and cut tracebacks (which quote hidden test
# lines) down to the error message that check_value wrote for them.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "pagedkv_lib.course.ConciseErrors",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
