"""nbgrader for the instructor on the hub: the course directory is their copy of the course repository.

nbgrader then also reads that repository's own nbgrader_config.py (folders, autograde hooks).
"""
import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.root = os.environ["PAGEDKV_COURSE"]
