"""What the notebooks use, and only they: nothing else in :mod:`pagedkv_lib` imports this package.

* :mod:`.gates`: predictions that stay hidden until committed, and their record.
* :mod:`.answer_keys`: what each lesson's gates and practices hold back (answers, reveals, hints,
  known mistakes), one module per lesson, computed from the live state a cell passes in.
* :mod:`.click_delay`: how long a click waited behind running cells (a late Commit is refused).
* :mod:`.record`: each commit saved with the notebook, as an output of its own mime type.
* :mod:`.practice`, :mod:`.canvas`: the practice loop with hints and known mistakes; its answer
  canvas's three word-rule checks (Claim, Mechanism, Bridge).
* :mod:`.items`, :mod:`.learning_map`: each lesson's items, central claim and opening lens; its map.
* :mod:`.room`, :mod:`.handoff`, :mod:`.drafts`: the research room, its grounded hand-off text, and
  its draft file beside the notebook.
* :mod:`.inputs`, :mod:`.views`: checked ids and numbers; widget-or-text display bundles.
* :mod:`.viz`: figures of accounting and of live allocator state.
* :mod:`.replay`: a ledger batch played on the real allocators.
* :mod:`.lab`, :mod:`.lab_view`: the Demo lesson's allocation and simulator labs (plain core; widgets).
* :mod:`.code_lesson`: what the Code lesson prints beside the code it shows.
* :mod:`.speed_table`: the Code lesson's decode-speed gate: its answer and its reveal (table and
  sentences), from a live :class:`~pagedkv_lib.kernels.timing.DecodeSpeed`.
* :mod:`.engines_today`: the live tables and controls of each lesson's last part, "what today's engines
  do" (hash-chained keys, hybrid models, swap or recompute, chunked prefill, a CPU tier).
* :mod:`.colab`: the notebooks' Colab setup cell, and ``python -m pagedkv_lib.lesson.colab``.
"""
