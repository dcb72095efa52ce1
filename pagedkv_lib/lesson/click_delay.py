"""How long a widget click waited behind running cells before the kernel handled it (seconds).

A click on Commit reaches the kernel as a message stamped by the browser. While the kernel runs
cells (Run All, a slow cell), the message waits; the commit it asks for would then be made, and
shown as made, long after the learner clicked, perhaps after they saved the notebook and left, so
its saved record would never reach the file. A view asks :func:`click_wait` and refuses a click
that waited more than :data:`BUSY_S`, saying so, so that a commit is made only while its cell's
output can still be saved.

The browser's clock and the kernel's may differ. Each cell's request is stamped by the same
browser, so the smallest ``kernel time at the cell's start - its stamp`` seen so far bounds the
clock difference plus the network delay from above; a click's wait is ``kernel time now - its
stamp`` less that bound (so a slow network or a skewed clock never counts as waiting).
"""
from __future__ import annotations

from datetime import datetime, timezone

BUSY_S = 3.0
"""A click handled more than this many seconds after it was made is refused (the kernel was busy)."""

_OFFSET: list[float] = []   # the smallest kernel-minus-browser difference seen at a cell's start, seconds
_WATCHING: list[object] = []


def stamp(message) -> datetime | None:
    """The browser's time stamp of a kernel message (its header's ``date``), or None if it has none."""
    date = (message or {}).get("header", {}).get("date")
    if isinstance(date, str):
        try:
            date = datetime.fromisoformat(date.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(date, datetime):
        return None
    return date if date.tzinfo else date.replace(tzinfo=timezone.utc)


def note_cell_start(sent: datetime | None, now: datetime) -> None:
    """Keep the smallest ``now - sent`` (seconds) over the cells started so far."""
    if sent is not None:
        gap = (now - sent).total_seconds()
        _OFFSET[:] = [min(_OFFSET + [gap])]


def wait_of(sent: datetime | None, now: datetime) -> float | None:
    """Seconds a message stamped ``sent`` waited before ``now``, clock difference removed; None if unknown."""
    if sent is None or not _OFFSET:
        return None
    return max(0.0, (now - sent).total_seconds() - _OFFSET[0])


def _kernel():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return getattr(get_ipython(), "kernel", None)


def _parent(kernel):
    try:
        return kernel.get_parent("shell")
    except Exception:  # an older kernel without get_parent: no stamp to judge by
        return None


def watch() -> None:
    """Start noting each cell's start in this kernel (once; outside a kernel, nothing)."""
    kernel = _kernel()
    if kernel is None or _WATCHING:
        return
    kernel.shell.events.register("pre_run_cell", lambda *_: note_cell_start(
        stamp(_parent(kernel)), datetime.now(timezone.utc)))
    _WATCHING.append(kernel)
    note_cell_start(stamp(_parent(kernel)), datetime.now(timezone.utc))   # the cell running now


def click_wait() -> float | None:
    """How long the click being handled now waited (seconds), or None where that cannot be known."""
    kernel = _kernel()
    if kernel is None:
        return None
    message = _parent(kernel)
    if (message or {}).get("header", {}).get("msg_type") != "comm_msg":
        return None
    return wait_of(stamp(message), datetime.now(timezone.utc))


def refusal(action: str) -> str | None:
    """The message refusing a click that waited too long (``action``: "Commit", "Check"), or None."""
    waited = click_wait()
    if waited is None or waited <= BUSY_S:
        return None
    return f"Not done: the kernel was busy for {waited:.0f} s after your click. {action} again now."
