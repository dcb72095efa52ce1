"""Block hashes, vLLM v1 style: a full block's key is a hash of its parent's key, its tokens and extra keys.

vLLM names the K/V states of a full block by ``hash(parent_hash, block_tokens, extra_keys)``
(``docs/design/prefix_caching.md``): the parent's hash stands for every token before the
block, so the key of block ``i`` covers ``tokens[:(i + 1) * S]`` in a constant number of bytes,
and it can travel (to another worker, to a CPU tier, to disk) without the tokens. Extra keys
separate states that the same tokens can have: a LoRA adapter id, multimodal input hashes,
and a tenant's ``cache_salt``, which vLLM puts into the first block only (every later block
inherits it through its parent).

The price is that two different prefixes whose keys collide are served each other's states:
a wrong hit, with no error. How likely that is depends on the number of key bits ``b`` and on
how many blocks are cached (``n``): :func:`wrong_hit_probability` and
:func:`collision_probability` give the birthday bound, and :func:`find_collision` finds a
collision on a deliberately short hash in a few hundred tries.

Hash functions on offer (``HASH_FUNCTIONS``; each is ``fn(parent, tokens, extra) -> key``):

* ``"builtin"``: Python's ``hash`` of the tuple, 64 bits, fast, but not meant to resist
  crafted inputs: ints ``t`` and ``t + 2**61 - 1`` hash alike, so two such token blocks collide;
  and a str or bytes salt hashes differently in every process (``PYTHONHASHSEED``), so its keys
  do not travel to another machine;
* ``"blake2b-64"``: BLAKE2b cut to 8 bytes (``hashlib``), a 64-bit cryptographic hash;
* ``"sha256"``: SHA-256 (``hashlib``), 256 bits, what vLLM offers for multi-tenant use.

:func:`truncated_hash` keeps only the low ``bits`` bits of any of them (for demonstrations).
"""
from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..validation import check_choice, check_int

BlockHashFn = Callable[[object, tuple, tuple], object]
"""``fn(parent key or None, block tokens, extra keys) -> key`` (an int or bytes)."""


def _block_message(parent: bytes | None, tokens: tuple, extra: tuple) -> bytes:
    """An unambiguous byte string for ``(parent, tokens, extra)``, for a hash whose keys have one length.

    A tag says whether there is a parent; the token count comes before the tokens, packed as
    8-byte unsigned ints (ids of ``2**64`` and more, which the library allows, fall back to their
    ``repr`` under a count no block reaches); the extra keys' ``repr`` comes last, after a 0 byte.
    """
    try:
        body = len(tokens).to_bytes(4, "little") + array("Q", tokens).tobytes()
    except OverflowError:
        body = b"\xff\xff\xff\xff" + repr(tuple(tokens)).encode()
    head = b"\x00" if parent is None else b"\x01" + parent
    return head + body + (b"\x00" + repr(extra).encode() if extra else b"")


def builtin_hash(parent, tokens: tuple, extra: tuple) -> int:
    """Python's ``hash((parent, tokens, extra))``: 64 bits, fast, easy to make collide on purpose."""
    return hash((parent, tokens, extra))


def blake2b_64(parent: bytes | None, tokens: tuple, extra: tuple) -> bytes:
    """BLAKE2b with an 8-byte (64-bit) digest of the block's message."""
    return hashlib.blake2b(_block_message(parent, tokens, extra), digest_size=8).digest()


def sha256(parent: bytes | None, tokens: tuple, extra: tuple) -> bytes:
    """SHA-256 (32-byte digest) of the block's message."""
    return hashlib.sha256(_block_message(parent, tokens, extra)).digest()


HASH_FUNCTIONS: dict[str, BlockHashFn] = {"builtin": builtin_hash, "blake2b-64": blake2b_64, "sha256": sha256}
"""The block hash functions by name."""

HASH_BITS = {"builtin": 64, "blake2b-64": 64, "sha256": 256}
"""Key bits ``b`` of each named hash (Python's ``hash`` is 64 bits on 64-bit builds)."""


def get_hash_fn(hash_fn: str | BlockHashFn) -> BlockHashFn:
    """A hash function by name (one of ``HASH_FUNCTIONS``), or a callable passed through."""
    if callable(hash_fn):
        return hash_fn
    return HASH_FUNCTIONS[check_choice("hash_fn", hash_fn, HASH_FUNCTIONS)]


def truncated_hash(hash_fn: str | BlockHashFn, bits: int) -> BlockHashFn:
    """``hash_fn`` keeping only its low ``bits`` bits (an int key): a short hash, to show collisions."""
    fn = get_hash_fn(hash_fn)
    mask = (1 << check_int("bits", bits, minimum=1, maximum=256)) - 1

    def short(parent: int | None, tokens: tuple, extra: tuple) -> int:
        if parent is not None and fn is not builtin_hash:
            parent = parent.to_bytes(32, "little")  # the byte hashes chain on bytes
        key = fn(parent, tokens, extra)
        return (key if isinstance(key, int) else int.from_bytes(key, "little")) & mask

    short.__name__ = f"{getattr(fn, '__name__', 'hash')}_{bits}bit"
    return short


def block_hash(parent, tokens: Sequence[int], extra_keys: tuple = (), *, hash_fn: str | BlockHashFn = "sha256"):
    """The key of one full block: ``hash_fn(parent key, tuple(tokens), extra_keys)``; ``parent`` None for block 0."""
    return get_hash_fn(hash_fn)(parent, tuple(tokens), tuple(extra_keys))


def chain_keys(hash_fn: BlockHashFn, token_blocks: Iterable[tuple], salt=None, parent=None) -> Iterator:
    """Yield the chain key of each block of ``token_blocks`` (tuples of token ids), each chained to the one
    before; ``parent`` is the key of the block before the first (None: the first is block 0).

    The salt rule, and the one place it is written: ``salt`` enters block 0's hash only (the block
    with no parent, vLLM's ``cache_salt``); every later block inherits it through its parent's key.
    Lazy, so that a lookup that stops at its first miss hashes no further.
    """
    first = () if salt is None else (salt,)
    for tokens in token_blocks:
        parent = hash_fn(parent, tokens, first if parent is None else ())
        yield parent


def chain_hashes(tokens: Sequence[int], block_size: int, *, salt=None, hash_fn: str | BlockHashFn = "sha256",
                 start: int = 0, parent=None) -> list:
    """The keys of the full blocks of ``tokens`` from block ``start`` on, each chained to the one before.

    ``salt`` enters block 0 only (:func:`chain_keys`); ``parent`` is the key of block ``start - 1``
    (None exactly when ``start`` is 0), so a request's keys can be extended as it grows. A
    trailing partly filled block has no key (only full blocks are cached).
    """
    fn, S = get_hash_fn(hash_fn), check_int("block_size", block_size, minimum=1)
    start = check_int("start", start, minimum=0)
    if (parent is None) != (start == 0):
        raise ValueError(f"parent must be the key of block start - 1, and None exactly when start is 0; got "
                         f"start={start}, parent={parent!r}")
    blocks = (tuple(tokens[i * S:(i + 1) * S]) for i in range(start, len(tokens) // S))
    return list(chain_keys(fn, blocks, salt, parent))


# ------------------------------------------------------------------ how likely a wrong hit is

def wrong_hit_probability(num_cached_blocks: int, bits: int, lookups: int = 1) -> float:
    """Chance that ``lookups`` lookups of new blocks hit one of ``n`` cached keys by accident.

    Each lookup of a block that is not cached meets a uniformly random ``b``-bit key, which
    equals one of the ``n`` cached keys with probability ``n / 2**b``; over ``m`` lookups the
    chance of at least one wrong hit is ``1 - (1 - n / 2**b) ** m`` (computed without rounding
    to 0 for tiny values).
    """
    n = check_int("num_cached_blocks", num_cached_blocks, minimum=0)
    b = check_int("bits", bits, minimum=1)
    m = check_int("lookups", lookups, minimum=0)
    p = min(1.0, n / 2.0**b)
    if p == 1.0:
        return 1.0 if m else 0.0
    return -math.expm1(m * math.log1p(-p))


def collision_probability(num_blocks: int, bits: int) -> float:
    """The birthday bound: chance that some two of ``n`` distinct blocks share a ``b``-bit key.

    ``1 - prod_{i<n} (1 - i / 2**b) ~= 1 - exp(-n (n - 1) / 2**(b + 1))``, the approximation
    used here (accurate while ``n`` is far below ``2**b``; exact to within a factor near 1 for
    every case a lesson shows).
    """
    n = check_int("num_blocks", num_blocks, minimum=0)
    b = check_int("bits", bits, minimum=1)
    return -math.expm1(-n * (n - 1) / 2.0 ** (b + 1))


def find_collision(hash_fn: BlockHashFn, block_size: int, *, start: int = 0,
                   max_tries: int = 1 << 20) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two different first blocks (``block_size`` token ids each) with the same key under ``hash_fn``.

    Tries blocks ``(start + i, 0, 0, ...)`` in turn and remembers each key: a birthday search,
    which for a ``b``-bit hash needs about ``2**(b / 2)`` tries (a few hundred for 16 bits).
    Raises ``ValueError`` if none turns up within ``max_tries``.
    """
    S = check_int("block_size", block_size, minimum=1)
    seen: dict = {}
    for i in range(check_int("max_tries", max_tries, minimum=1)):
        tokens = (start + i,) + (0,) * (S - 1)
        key = hash_fn(None, tokens, ())
        if key in seen:
            return seen[key], tokens
        seen[key] = tokens
    raise ValueError(f"no collision among {max_tries} blocks: hash_fn has too many bits for a birthday search "
                     f"of this size")
