"""The teaching ledger: logical tokens vs unique stored tokens, reserved slots and slack.

This is the subject page's allocation witness as a library function. Semantics:

* requests are processed in order; physical block ids are handed out 0, 1, 2, ...;
* a request with a sharing ``group`` maps the prefix blocks of its ``(group, prefix)`` key:
  the first member allocates ``ceil(prefix / S)`` blocks, later members reuse them;
* a request without a group gets its own prefix blocks;
* every tail gets fresh blocks, even when the prefix's last block has room left
  (so a prefix that does not fill its last block leaves slack that sharing keeps).

Real block managers differ on that last point (vLLM caches and shares only *full* blocks;
a forked sequence shares a partial block until it writes): see ``pagedkv_lib.blocks.manager``.

Identities that hold for every input: ``reserved_slots = S * num_blocks``,
``slack = reserved_slots - unique_tokens``, ``unique_tokens <= logical_tokens``, and sharing
never increases ``reserved_slots`` (compare :func:`without_sharing`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .validation import check_int


@dataclass(frozen=True)
class Request:
    """One request of the ledger: ``prefix`` prompt tokens (shareable) then ``tail`` own tokens."""

    id: str
    prefix: int
    tail: int
    group: str | None = None

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise TypeError(f"request id must be a non-empty string, got {self.id!r}")
        # stored as Python ints, so numpy integers cannot overflow in the sums
        object.__setattr__(self, "prefix", check_int(f"prefix of request {self.id!r}", self.prefix, minimum=0))
        object.__setattr__(self, "tail", check_int(f"tail of request {self.id!r}", self.tail, minimum=0))
        if self.group is not None and (not isinstance(self.group, str) or not self.group):
            raise TypeError(f"group of request {self.id!r} must be a non-empty string or None, got {self.group!r}")

    @property
    def tokens(self) -> int:
        """``T_i``: logical tokens of this request (prefix + tail)."""
        return self.prefix + self.tail


@dataclass(frozen=True)
class Ledger:
    """The ledger of one batch at one block size. Token counts in tokens, slots in token slots."""

    block_size: int
    logical_tokens: int
    unique_tokens: int
    reserved_slots: int
    slack: int
    tables: dict[str, list[int]] = field(repr=False)
    block_fill: dict[int, int] = field(repr=False, default_factory=dict)
    """Tokens stored in each physical block (between 1 and ``block_size``)."""

    @property
    def num_blocks(self) -> int:
        """Distinct physical blocks the batch holds."""
        return self.reserved_slots // self.block_size

    @property
    def shared_saved_tokens(self) -> int:
        """``T_shared_saved = T_logical - T_unique``: token references served by shared blocks."""
        return self.logical_tokens - self.unique_tokens

    def summary(self) -> dict[str, int]:
        """The four headline figures, in the order the subject page prints them."""
        return ledger_summary(self.logical_tokens, self.unique_tokens, self.reserved_slots, self.slack)


def ledger_summary(logical: int, unique: int, reserved: int, slack: int) -> dict[str, int]:
    """The four headline figures as a dict, in the order the subject page prints them.

    Shared by :meth:`Ledger.summary` and :meth:`pagedkv_lib.blocks.stats.AllocatorStats.summary`,
    so the two always use the same keys.
    """
    return {"logical": logical, "unique": unique, "reserved": reserved, "slack": slack}


_FIELDS = ("id", "prefix", "tail", "group")


def as_request(item: Request | Mapping) -> Request:
    """Accept a :class:`Request` or a dict with keys id, prefix, tail and optional group."""
    if isinstance(item, Request):
        return item
    if not isinstance(item, Mapping):
        raise TypeError(f"each request must be a Request or a dict with keys {_FIELDS}, got {item!r}")
    unknown = set(item) - set(_FIELDS)
    missing = {"id", "prefix", "tail"} - set(item)
    if unknown or missing:
        raise ValueError(f"request {item!r}: missing keys {sorted(missing)}, unknown keys {sorted(unknown)}; "
                         f"allowed keys are {_FIELDS}")
    return Request(item["id"], item["prefix"], item["tail"], item.get("group"))


def _requests(requests: Iterable[Request | Mapping]) -> list[Request]:
    if isinstance(requests, (str, bytes, Mapping)) or not hasattr(requests, "__iter__"):
        raise TypeError(f"requests must be a list of requests, got {requests!r}")
    reqs = [as_request(r) for r in requests]
    seen = set()
    for r in reqs:
        if r.id in seen:
            raise ValueError(f"request ids must be unique; {r.id!r} appears more than once")
        seen.add(r.id)
    return reqs


def allocate(requests: Iterable[Request | Mapping], block_size: int = 8) -> Ledger:
    """Build the ledger for ``requests`` at ``block_size`` tokens per block (see module doc)."""
    S = check_int("block_size", block_size, minimum=1)
    reqs = _requests(requests)
    shared: dict[tuple[str, int], list[int]] = {}
    tables: dict[str, list[int]] = {}
    fill: dict[int, int] = {}
    next_block = logical = unique = 0

    def fresh(num_tokens: int) -> list[int]:
        nonlocal next_block
        blocks = []
        for start in range(0, num_tokens, S):
            fill[next_block] = min(S, num_tokens - start)
            blocks.append(next_block)
            next_block += 1
        return blocks

    for r in reqs:
        logical += r.tokens
        key = (r.group, r.prefix)
        if r.group is not None and key in shared:
            prefix_blocks = shared[key]
        else:
            prefix_blocks = fresh(r.prefix)
            unique += r.prefix
            if r.group is not None:
                shared[key] = prefix_blocks
        tables[r.id] = prefix_blocks + fresh(r.tail)
        unique += r.tail
    reserved = next_block * S
    return Ledger(S, logical, unique, reserved, reserved - unique, tables, fill)


def without_sharing(requests: Iterable[Request | Mapping]) -> list[Request]:
    """The same requests with their groups removed: every prefix gets its own blocks."""
    return [Request(r.id, r.prefix, r.tail, None) for r in _requests(requests)]


PAGE_BATCH = (
    Request("A1", 12, 3, "prompt-A"),
    Request("A2", 12, 5, "prompt-A"),
    Request("A3", 12, 2, "prompt-A"),
)
"""The subject page's witness batch: three continuations of one 12-token prompt."""
