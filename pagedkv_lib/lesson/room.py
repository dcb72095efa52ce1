"""The research room: attach a question to one item of a lesson and take a grounded hand-off with you.

:func:`research_room` opens it for an item chosen from the lesson's items (:mod:`.items`): a
question field (prefilled), the evidence to inspect and what would resolve it, the AI companion's
four choices, a draft (one note, one next action; saved beside the notebook by :mod:`.drafts`),
and the hand-off text (:mod:`.handoff`), rebuilt as anything changes, with a copy button. The
copy happens in the browser; where its clipboard is not available, the text is selected for
Ctrl+C. Nothing here makes a network call. Without widgets, :meth:`ResearchRoom.set` and
:meth:`ResearchRoom.handoff` do the same from code.
"""
from __future__ import annotations

from . import access, drafts, handoff as H, items as I
from .record import on_commit
from .views import Shown, escape

COPY_BUTTON = """<button class="jupyter-button widget-button pagedkv-copy" onclick="(function(b){
var room=b.closest('.pagedkv-room'), t=room && room.querySelector('.pagedkv-handoff textarea'),
s=b.parentNode.querySelector('.pagedkv-copy-status'); if(!t){return;}
function pick(){t.focus(); t.select(); s.textContent='The hand-off is selected: press Ctrl+C (Cmd+C on a Mac) to copy it.';}
if(navigator.clipboard && window.isSecureContext){navigator.clipboard.writeText(t.value).then(
function(){s.textContent='Copied: paste it into any AI tutor or forum.';}, pick);} else {pick();}
})(this)">Copy hand-off</button> <span class="pagedkv-copy-status" role="status"></span>""".replace("\n", " ")
"""The copy button: browser-side only (the kernel cannot reach the learner's clipboard)."""


class ResearchRoom(Shown):
    """One lesson's research room. ``lab`` (an :class:`~.lab_view.AllocationLab`) supplies the lab item's state."""

    def __init__(self, lesson: str, item: str | None = None, *, lab=None, folder=None):
        self.lesson = I.lesson(lesson)
        self.lab = lab
        self.path = drafts.draft_path(self.lesson.name, folder)
        self.drafts, self.message = drafts.load(self.path)
        self.choices = {k: opts[0] for k, opts in H.COMPANION.items()}
        self.item = self.lesson.item(item) if item is not None else self.lesson.items[0]
        self.question = self.note = self.next_action = ""
        self._load_item()
        self._widget = None

    def _load_item(self) -> None:
        saved = self.drafts.get(self.item.id, {})
        self.question = saved.get("question") or H.default_question(self.item)
        self.note, self.next_action = saved.get("note", ""), saved.get("next_action", "")

    # ------------------------------------------------------------ state

    def gate(self):
        """The gate the selected item's prediction belongs to (None if there is none, or it is not built yet)."""
        if self.item.id == "lab" and self.lab is not None:
            return self.lab.gate
        from .gates import _GATES
        return _GATES.get(self.item.gate) if self.item.gate else None

    def lab_state(self) -> dict | None:
        """The lab item's demo state (its controls), when the lab item is selected and a lab is attached."""
        return self.lab.state() if self.item.id == "lab" and self.lab is not None else None

    def set(self, **fields) -> "ResearchRoom":
        """Change the room from code: ``item=``, ``question=``, ``note=``, ``next_action=``, and the
        companion's ``goal=``, ``comfort=``, ``style=``, ``stuck=`` (each one of its options)."""
        for name, value in fields.items():
            if name in H.COMPANION:
                if value not in H.COMPANION[name]:
                    raise ValueError(f"{name} must be one of {H.COMPANION[name]}, got {value!r}")
            elif name == "item":
                self.lesson.item(value)
            elif name in ("question", "note", "next_action"):
                if not isinstance(value, str):
                    raise TypeError(f"{name} must be text, got {type(value).__name__}")
            else:
                raise TypeError(f"unknown field {name!r}; the fields are item, question, note, next_action, "
                                f"{', '.join(H.COMPANION)}")
        if "item" in fields and fields["item"] != self.item.id:
            self.item = self.lesson.item(fields["item"])
            self._load_item()
        for name, value in fields.items():
            if name in H.COMPANION:
                self.choices[name] = value
            elif name != "item":
                setattr(self, name, value)
        if self._widget is not None:
            self._widget.pull()
        return self

    def handoff(self) -> str:
        """The hand-off text for the selected item, as it stands now."""
        from .gates import record
        return H.handoff_text(self.lesson, self.item, self.question, self.choices, note=self.note,
                              next_action=self.next_action, gate=self.gate(), lab_state=self.lab_state(),
                              lab_now=None if self.lab is None else self.lab.state(), committed=record())

    def save_draft(self) -> str:
        """Save the selected item's note, next action and question beside the notebook; return the message."""
        self.drafts = drafts.save(self.path, self.lesson.name, self.item.id, self.note, self.next_action,
                                  self.question)
        self.message = drafts.where_note(self.path)
        return self.message

    # ------------------------------------------------------------ views

    @property
    def widget(self):
        if self._widget is None:
            self._widget = _RoomView(self)
        return self._widget

    def text(self) -> str:
        lines = [f"RESEARCH ROOM: {self.lesson.name}, item {self.item.id!r} ({self.item.kind}: {self.item.title})",
                 f"Items: {', '.join(i.id for i in self.lesson.items)}", self.message,
                 "No widgets here? Change it with .set(item=..., question=..., goal=..., comfort=..., style=..., "
                 "stuck=..., note=..., next_action=...), save with .save_draft(), print .handoff().",
                 "Companion options: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in H.COMPANION.items()),
                 "", self.handoff()]
        return "\n".join(lines)

    def shown_slots(self) -> list:
        return []


def _list_html(title: str, rows) -> str:
    return f"<b>{escape(title)}</b><ul style='margin-top:0'>" + "".join(f"<li>{escape(r)}</li>" for r in rows) + "</ul>"


class _RoomView:
    """Widgets of a :class:`ResearchRoom`; every change goes to the room, then the hand-off is rebuilt."""

    def __init__(self, room: ResearchRoom):
        import ipywidgets as w
        self.room, self._pulling = room, False
        # width and max-width: each field narrows with the window (reflow at 320 CSS px, WCAG 1.4.10)
        style = {"description_width": "14em"}

        def wide():
            return w.Layout(width="48em", max_width="100%")
        self.item = w.Dropdown(options=[(f"{i.kind}: {i.title}", i.id) for i in room.lesson.items],
                               value=room.item.id, description="attach to", style=style, layout=wide())
        self.about = w.HTML()
        self.question = w.Textarea(description="your question", style=style,
                                   layout=w.Layout(width="46em", max_width="100%", height="4em"))
        self.companion = {k: w.Dropdown(options=list(opts), description=H.LABELS[k], style=style, layout=wide())
                          for k, opts in H.COMPANION.items()}
        self.note = w.Text(description="draft: one note", style=style, layout=wide())
        self.next_action = w.Text(description="draft: next action", style=style, layout=wide())
        self.save = w.Button(description="Save draft")
        self.message = w.Label()
        self.handoff = w.Textarea(layout=w.Layout(width="46em", max_width="100%", height="16em"))
        self.handoff.add_class("pagedkv-handoff")
        handoff_title = w.HTML("<b>Hand-off</b> (updated as you type)")
        access.name_by(self.handoff, handoff_title)
        self.copy = w.HTML(COPY_BUTTON)
        self.save.on_click(self._on_save)
        self.pull()
        on_commit(self.pull)   # a prediction committed after the room was drawn joins the hand-off
        lab = room.lab
        for name in ("trace", "block_size", "sharing", "n"):   # so does a lab control moved since
            control = getattr(lab, name, None)
            if hasattr(control, "observe"):
                control.observe(self._on_lab, names="value")
        self.item.observe(self._on_item, names="value")
        for control in (self.question, self.note, self.next_action, *self.companion.values()):
            control.observe(self._on_change, names="value")
        self.box = w.VBox([w.HTML("<b>Research room.</b> Attach a question to one item of this lesson; the "
                                  "hand-off below carries it, with its context, to any AI tutor or forum. "
                                  "Nothing is sent from here."),
                           self.item, self.about, self.question, *self.companion.values(), self.note,
                           self.next_action, w.HBox([self.save, self.message]),
                           handoff_title, self.handoff, self.copy])
        self.box.add_class("pagedkv-room")
        access.control(self.box)

    def pull(self) -> None:
        """Show the room's state in the widgets (observers stay quiet meanwhile)."""
        room, self._pulling = self.room, True
        try:
            self.item.value = room.item.id
            self.question.value, self.note.value = room.question, room.note
            self.next_action.value = room.next_action
            for k, control in self.companion.items():
                control.value = room.choices[k]
            it = room.item
            content = it.content if it.function is None else f"{it.content} ({it.function})"
            self.about.value = (f"<i>{escape(content)}</i><br>" + _list_html("Evidence to inspect", it.evidence)
                                + _list_html("What would resolve this", it.resolve))
            self.message.value = room.message
            self.handoff.value = room.handoff()
        finally:
            self._pulling = False

    def _on_lab(self, change=None) -> None:
        if not self._pulling:
            self.pull()

    def _on_item(self, change) -> None:
        if not self._pulling:
            self.room.set(item=change["new"])

    def _on_change(self, change=None) -> None:
        if self._pulling:
            return
        fields = {"question": self.question.value, "note": self.note.value, "next_action": self.next_action.value}
        fields.update({k: c.value for k, c in self.companion.items()})
        self.room.set(**fields)

    def _on_save(self, _button=None) -> None:
        try:
            self.room.save_draft()
        except OSError as err:
            self.room.message = f"Could not save the draft ({err.strerror}); copy your note instead."
        self.pull()


def research_room(lesson: str, item: str | None = None, *, lab=None, folder=None) -> ResearchRoom:
    """Open the research room of ``lesson`` (``"01_intuition"`` ...) on ``item`` (an item id; the first if None)."""
    return ResearchRoom(lesson, item, lab=lab, folder=folder)
