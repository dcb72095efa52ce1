"""What the notebooks use, and only they: nothing else in :mod:`pagedkv_lib` imports this package.

* :mod:`.gates`: predictions that stay hidden until committed, and their record.
* :mod:`.practice`: the practice loop with hints and known mistakes.
* :mod:`.record`: the helpers gates and practice share (ids, the record, widget bundles).
* :mod:`.viz`: figures of accounting and of live allocator state.
* :mod:`.replay`: a ledger batch played on the real allocators.
* :mod:`.lab`, :mod:`.lab_view`: the Demo lesson's allocation and simulator labs (plain core; widgets).
* :mod:`.code_lesson`: what the Code lesson prints beside the code it shows.
* :mod:`.colab`: the notebooks' Colab setup cell, and ``python -m pagedkv_lib.lesson.colab``.
"""
