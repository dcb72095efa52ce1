"""nbgrader for the instructor on the hub: the course directory is their copy of the course repository.

nbgrader then also reads that repository's own nbgrader_config.py (folders, autograde hooks).
"""
import os

c = get_config()  # noqa: F821 (provided by nbgrader)

c.CourseDirectory.root = os.environ["PAGEDKV_COURSE"]
# Collect takes a hand-in only from the learner who owns it, never reading a link, and refuses the rest aloud;
# feedback is released learner by learner (hub/singleuser/python/pagedkv_collect.py).
c.ExchangeFactory.collect = "pagedkv_collect.OwnedCollect"
c.ExchangeFactory.release_feedback = "pagedkv_collect.OwnedReleaseFeedback"
