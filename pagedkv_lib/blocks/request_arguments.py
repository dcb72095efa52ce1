"""The argument checks every block manager makes at its edge, written once so that managers agree on bad input.

:class:`~.manager.BlockManager` and :class:`~.hybrid_manager.HybridBlockManager` (and the hashed
manager, a ``BlockManager``) call these: the same bad value raises the same error, with the same
message naming the argument, the value and what is allowed, before anything changes. (A request id
is looked up by ``BlockManager._request``, which the hybrid manager shares as it is.)
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..validation import check_new_id, check_salt, check_token_ids


def check_flag(name: str, value) -> bool:
    """``value`` if it is ``True`` or ``False`` (not 0, 1 or None)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_prompt(request_id, prompt_token_ids: Sequence[int], salt, live: Mapping) -> list[int]:
    """The prompt's token ids as a new list, once ``request_id`` is a new id (not in ``live``), the prompt
    holds at least one token id >= 0, and ``salt`` is a valid prefix-cache salt."""
    check_new_id("request_id", request_id, live)
    tokens = list(check_token_ids("prompt_token_ids", prompt_token_ids))
    if not tokens:
        raise ValueError(f"prompt_token_ids must hold at least one token, got an empty prompt "
                         f"for request {request_id!r}")
    check_salt("salt", salt)
    return tokens

