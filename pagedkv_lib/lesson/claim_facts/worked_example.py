"""The subject page's worked example (A1-A3 with one shared prompt), as the facts of every lesson read it."""
from __future__ import annotations


def batch():
    """A1-A3, the requests of the subject page's ledger."""
    from pagedkv_lib.ledger import PAGE_BATCH
    return PAGE_BATCH


def prompt():
    """The A1-A3 prompt's length in tokens (one prompt shared by all three)."""
    (prefix,) = {r.prefix for r in batch()}
    return (prefix,)


def tails():
    """Each request's tail length in tokens, A1 first."""
    return tuple(r.tail for r in batch())
