"""The course's one palette: a memory category has the same colour, and the same hatching, in every figure.

Used by the lesson figures (:mod:`pagedkv_lib.lesson.viz`) and the simulator's
(:mod:`pagedkv_lib.sim.plots`); plain hex strings, so importing it loads nothing.

Chosen for readers with a colour-vision deficiency: under simulated protanopia, deuteranopia and
tritanopia (Machado, Oliveira and Fernandes 2009, full severity) every two of :data:`COLORS` and
:data:`SHARED` stay at least 25 CIELAB units apart (``tests/test_palette.py`` checks it). Colour is
never the only cue: each category also has its own hatching (:data:`HATCHES`), and a block map
writes each block's owner in it.
"""

COLORS = {"token_states": "#004488", "reservation": "#EECC66", "internal_fragmentation": "#994455",
          "external_fragmentation": "#56B4E9", "slack": "#BFBFBF"}
"""One colour per occupied-memory category (:data:`~pagedkv_lib.sim.CATEGORIES` but ``free``), in every figure."""

SHARED = "#D55E00"
"""Fill (or outline) of a block that more than one block table holds (ref count > 1)."""

HATCHES = {"token_states": "", "reservation": "..", "internal_fragmentation": "xx",
           "external_fragmentation": "\\\\", "slack": "///", "shared": "++", "free": ""}
"""The hatching of each category (matplotlib's patterns): a second cue beside the colour."""

OWNERS = ("#004488", "#117733", "#AA4499", "#DDCC77", "#88CCEE", "#882255", "#44AA99", "#999933")
"""Token colours of the requests in a block map, in the order they are listed (then repeating);
each block also carries its owner's name, so no reader has to tell these apart by colour."""

CACHED = "#E0E0E0"
"""Fill of a cached free block: no table holds it, its states stay until it is evicted."""


def _luminance(hex_colour: str) -> float:
    """WCAG 2.1 relative luminance of ``"#RRGGBB"`` (0 black to 1 white)."""
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2.1 contrast ratio of two ``"#RRGGBB"`` colours, from 1 (same) to 21 (black on white)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_on(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill``: the colour of a label drawn on it."""
    return "#000000" if contrast(fill, "#000000") >= contrast(fill, "#FFFFFF") else "#FFFFFF"
