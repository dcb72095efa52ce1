"""pagedkv_lib: the library behind the pagedkv course.

Modules hold one idea each: ``accounting`` (Eq. 1-2, blocks, slack, GPU capacity), ``ledger``
(the subject page's allocation witness), ``allocator`` (the paged block manager), ``contiguous``
(the baseline it replaces), ``attention``, ``triton_attention`` and ``numba_attention`` (paged
attention; ``numba_kernel`` is the compiled half of the last; ``decode_timing`` times them
against contiguous decode), ``tinylm`` (a tiny decoder on either cache), the ``sim`` package
(the serving simulator), ``viz``, ``widgets`` and ``course``.
Import what you need from its module, e.g.
``from pagedkv_lib.accounting import bytes_per_token``; importing the package itself loads
neither torch nor triton nor numba.
"""
from .errors import OutOfBlocksError, PagedKVError

__version__ = "0.1.0"
__all__ = ["PagedKVError", "OutOfBlocksError", "__version__"]
