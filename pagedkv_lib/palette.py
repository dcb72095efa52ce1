"""The course's one palette: a memory category has the same colour in every figure.

Used by the lesson figures (:mod:`pagedkv_lib.lesson.viz`) and the simulator's
(:mod:`pagedkv_lib.sim.plots`); plain hex strings, so importing it loads nothing.
"""

COLORS = {"token_states": "#4C72B0", "reservation": "#CCB974", "internal_fragmentation": "#C44E52",
          "external_fragmentation": "#8172B3", "slack": "#BFBFBF"}
"""One colour per occupied-memory category (:data:`~pagedkv_lib.sim.CATEGORIES` but ``free``), in every figure."""
