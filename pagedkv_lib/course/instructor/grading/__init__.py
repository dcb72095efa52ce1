"""Grading: each submission run in a sandboxed kernel by a warm worker, and judged outside it
(see ``instructor/__init__.py``)."""
