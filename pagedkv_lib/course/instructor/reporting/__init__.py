"""Reporting: what the instructor and the learners read once a class is graded (see ``instructor/__init__.py``)."""
