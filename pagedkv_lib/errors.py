"""The library's exception classes.

Bad arguments raise ``TypeError`` (wrong kind of value) or ``ValueError`` (right kind,
outside what is allowed); the checks that raise them live in :mod:`pagedkv_lib.validation`.
Errors about the library's *state* (a pool that ran out of blocks, an unknown request)
derive from :class:`PagedKVError`.
"""
from __future__ import annotations


class PagedKVError(Exception):
    """Base class for errors about the state of a pagedkv_lib object."""


class OutOfBlocksError(PagedKVError):
    """A request needs more physical KV blocks than the pool can give, even after eviction."""


class UnknownRequestError(PagedKVError, KeyError):
    """A request id that is not live: never added, or already freed."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0])


class DuplicateRequestError(PagedKVError, ValueError):
    """A request id that is already live was added or forked into again."""


class InvariantError(PagedKVError, AssertionError):
    """A ``check_invariants()`` method found a broken invariant (a bug, not bad input)."""
