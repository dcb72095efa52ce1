"""Intake: submissions in, cleaned and checked before nbgrader sees them (see ``instructor/__init__.py``)."""
