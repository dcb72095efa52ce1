"""The grounded hand-off: a text that carries one lesson item and its context to any AI tutor or forum.

:func:`handoff_text` builds it from what the learner has seen and chosen: the course and lesson,
the item and its content (an equation's LaTeX, the source of the library function a code cell
shows, a demo state's controls and the learner's committed prediction), the lab's state where a lab
is attached, every prediction the learner has committed in this kernel with its outcome, the
question, the evidence to inspect, the companion's four choices, the draft, and the request to the
tutor. It holds nothing the learner has not seen: a gate not yet committed contributes its question
only, never its answer or explanation. Building it sends nothing anywhere.
"""
from __future__ import annotations

import importlib
import inspect

from .items import COURSE, Item, Lesson

COMPANION = {
    "goal": ("understand the idea", "check my answer to a practice", "prepare for the problem set",
             "connect it to a real serving system"),
    "comfort": ("new to this", "some background", "comfortable: go deeper"),
    "style": ("picture first", "equations first", "code first", "a worked example"),
    "stuck": ("nothing yet: exploring", "the notation", "why the numbers come out as they do",
              "how the code does it", "what to try next"),
}
"""The AI companion's four choices and their options (the first of each is the default)."""

LABELS = {"goal": "My goal", "comfort": "My comfort level", "style": "Preferred explanation style",
          "stuck": "What I am stuck on"}

REQUEST = ("Please answer as a careful tutor: stay with the sources and evidence named above, keep what "
           "the evidence shows apart from what you assume, name the mathematical objects you use (T_i, S, "
           "N_i, R, W, C_tok, block tables, ref counts), and end with one next action I can take in this "
           "notebook.")


def default_question(item: Item) -> str:
    """The question field's first text: asks for the smallest example that keeps the math exact."""
    return f"What is the smallest example that makes \"{item.title}\" clear while keeping the math exact?"


def function_source(ref: str) -> str:
    """The source of the library function ``"package.module:Name.attr"`` names."""
    module, _, name = ref.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return inspect.getsource(obj)


def prediction_note(gate) -> str:
    """What the hand-off may say about a gate: its question, and the prediction only once committed."""
    if gate is None:
        return "I have not reached this prediction yet."
    if not gate.committed:
        return f"Prediction asked: {gate.question} I have not committed my prediction yet."
    return f"Prediction asked: {gate.question} {gate.verdict()}"


def committed_lines(records) -> list[str]:
    """One line per committed prediction in ``records`` (the kernel's record, oldest first): the
    question, what the learner predicted and, where it was judged, the outcome they were shown."""
    lines = []
    for e in records:
        if e.get("kind") != "predict":
            continue
        mine = e["choice"] if e.get("choice") is not None else e.get("value")
        if e.get("outcome") == "recorded":
            lines.append(f"- {e['question']} I predicted {mine} (recorded, not judged here).")
        else:
            lines.append(f"- {e['question']} I predicted {mine}; it is {e['answer']} ({e['outcome']}).")
    return lines


def item_content(item: Item, gate=None, lab_state: dict | None = None) -> str:
    """The item's content as the hand-off carries it."""
    if item.kind == "equation":
        return f"Equation (LaTeX): $${item.content}$$"
    if item.function is not None:
        return (f"{item.content}\nLibrary function {item.function} (its source, as installed):\n"
                f"```python\n{function_source(item.function).rstrip()}\n```")
    if item.kind == "demo":
        lines = [item.content]
        if lab_state is not None:
            lines = ["Demo state: " + ", ".join(f"{k} = {v}" for k, v in lab_state.items())]
        lines.append(prediction_note(gate))
        return "\n".join(lines)
    return item.content


def handoff_text(lesson: Lesson, item: Item, question: str, choices: dict, *, note: str = "",
                 next_action: str = "", gate=None, lab_state: dict | None = None, lab_now: dict | None = None,
                 committed: list[dict] = ()) -> str:
    """The whole hand-off text, ready to paste.

    ``lab_state``: the selected demo item's own controls; ``lab_now``: an attached lab's controls,
    named whatever the item (omitted when it is the item's own state); ``committed``: the kernel's
    record of commits and checks, of which the predictions are listed.
    """
    lines = [f"I am studying the course {COURSE}, lesson {lesson.name} ({lesson.section}: {lesson.title}).",
             f"Selected item ({item.kind}): {item.title}", item_content(item, gate, lab_state)]
    if lab_now is not None and lab_now != lab_state:
        lines.append("The lab's state now: " + ", ".join(f"{k} = {v}" for k, v in lab_now.items()))
    predicted = committed_lines(committed)
    lines += ["", "My committed predictions in this lesson (each made before I saw its answer):"]
    lines += predicted or ["- none committed yet"]
    lines += ["", f"My question: {question.strip() or default_question(item)}", "", "Evidence to inspect:"]
    lines += [f"- {e}" for e in item.evidence]
    lines += ["", "What would resolve this:"] + [f"- {r}" for r in item.resolve] + [""]
    lines += [f"{LABELS[k]}: {choices[k]}" for k in COMPANION]
    if note.strip() or next_action.strip():
        lines += ["", f"My note so far: {note.strip() or '(none)'}",
                  f"My planned next action: {next_action.strip() or '(none)'}"]
    lines += ["", REQUEST]
    return "\n".join(lines)
