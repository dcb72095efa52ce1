"""The research room's local draft: one note and one next action per item, in a small JSON file beside
the notebook (the kernel's working folder), so it is there again when the notebook is reopened.

On Colab the working folder is the session's own ``/content``: the file shows in the Files pane and
is deleted when the runtime ends, so download it (or copy the note) before you close. A missing
file is an empty draft; a file that cannot be read gives a clear message and an empty draft, and
the notebook keeps working (the next save replaces it).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .record import now

VERSION = 1


def draft_path(lesson: str, folder: str | os.PathLike | None = None) -> Path:
    """Where the drafts of ``lesson`` live: ``<folder or cwd>/<lesson>.research.json``."""
    return Path(folder if folder is not None else os.getcwd()) / f"{lesson}.research.json"


def on_colab() -> bool:
    return "google.colab" in sys.modules


def where_note(path: Path) -> str:
    """One sentence saying where the draft is kept (and, on Colab, that the runtime forgets it)."""
    if on_colab():
        return (f"Your draft is saved in this Colab session's files ({path}, see the Files pane). Colab "
                "deletes them when the runtime ends: download the file or copy your note before you leave.")
    return f"Your draft is saved beside the notebook in {path.name}, and is restored when you reopen it."


def load(path: Path) -> tuple[dict, str]:
    """``(drafts by item id, message)``; a missing or unreadable file gives ``{}`` and says so."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, "No draft saved yet."
    except OSError as err:
        return {}, f"Could not read your draft file {path.name} ({err.strerror}); starting with an empty draft."
    try:
        data = json.loads(text)
        items = data["items"]
        if data.get("v") != VERSION or not isinstance(items, dict) or not all(
                isinstance(d, dict) and isinstance(d.get("note", ""), str)
                and isinstance(d.get("next_action", ""), str) for d in items.values()):
            raise ValueError("not a research-room draft")
    except (ValueError, KeyError, TypeError) as err:
        return {}, (f"Your draft file {path.name} could not be read ({err}); starting with an empty draft. "
                    "Saving a draft will replace the file.")
    return items, f"Draft restored from {path.name}."


def save(path: Path, lesson: str, item_id: str, note: str, next_action: str, question: str) -> dict:
    """Save one item's draft (keeping the other items' drafts a readable file holds); return all drafts."""
    for name, value in (("note", note), ("next_action", next_action), ("question", question)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be text, got {type(value).__name__}")
    items, _ = load(path)
    items[item_id] = {"note": note, "next_action": next_action, "question": question, "saved": now()}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"v": VERSION, "lesson": lesson, "items": items}, indent=1), encoding="utf-8")
    os.replace(tmp, path)
    return items
