"""pagedkv_lib: the library behind the pagedkv course.

Modules hold one idea each: ``accounting`` (Eq. 1-2, blocks, slack, GPU capacity), ``ledger``
(the subject page's allocation witness), and the modules later lessons add. Import what you
need from its module, e.g. ``from pagedkv_lib.accounting import bytes_per_token``.
"""
from .errors import OutOfBlocksError, PagedKVError

__version__ = "0.1.0"
__all__ = ["PagedKVError", "OutOfBlocksError", "__version__"]
