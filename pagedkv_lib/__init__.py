"""pagedkv_lib: the library behind the pagedkv course.

One idea per part, lowest layer first (``pyproject.toml``'s import-linter contract enforces it):

* ``errors``, ``validation``: the exceptions, and the argument checks behind every clear message;
* ``accounting``, ``ledger``, ``palette``: the Math lesson (Eq. 1-2, blocks, slack, GPU capacity),
  the subject page's allocation witness, and the one colour palette;
* ``blocks/``: the paged block manager and the contiguous baseline it replaces;
* ``attention/``: paged attention, the spec first, then speed-ups, CSR and Triton;
* ``kernels/``: the fused CPU paged decode (numba), optional;
* ``tinylm``: a tiny decoder on either cache;
* ``sim/``: the serving simulator;
* ``course/``: graded test cells and the instructor's nbgrader workflow;
* ``lesson/``: what the notebooks use (gates, practice, figures, labs), imported by nothing else.

Import what you need from its module, e.g.
``from pagedkv_lib.accounting import bytes_per_token``; importing the package itself loads
neither torch nor triton nor numba.
"""
from .errors import OutOfBlocksError, PagedKVError

__version__ = "0.1.0"
__all__ = ["PagedKVError", "OutOfBlocksError", "__version__"]
