"""A class folder of realistic and adversarial ps2_math downloads, built from the released notebook.

Used by the end-to-end class test. Each entry: file path inside the downloads folder, the notebook
text, and the fair raw score (None: the file is not graded as that student). Also the scratch course
the grading tests start from (:func:`course_copy`).
"""
import copy
import json
import re
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHEAT_OVERRIDE = "check_value = check_known_mistakes = lambda *a, **k: None\n"
CHEAT_PATCH_LIBRARY = ("import pagedkv_lib.course as _c, builtins\n"
                       "_c.check_value = _c.checks.check_value = lambda *a, **k: None\n"
                       "_c.check_known_mistakes = _c.checks.check_known_mistakes = lambda *a, **k: None\n"
                       "builtins.AssertionError = type('AssertionError', (Exception,), {})\n")
CHEAT_HIDE_ERRORS = ("ip = get_ipython()\n"
                     "ip.set_custom_exc((BaseException,), lambda *a, **k: None)\n"
                     "ip.input_transformers_post.append(lambda lines: ['try:\\n'] + ['    ' + l for l in lines]"
                     " + ['\\nexcept BaseException:\\n    pass\\n'])\n")
WRONG = {"q1_answer": "def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):\n    return 0\n",
         "q2_answer": "def blocks_needed(num_tokens, block_size):\n    return num_tokens // block_size\n",
         "q3_answer": "def reserved_and_slack(lengths, block_size):\n    return (0, 0)\n",
         "q4_answer": "def shared_prefix_ledger(prefix, tails, block_size):\n    return {}\n",
         "q5_answer": "gpu_blocks = 1\n", "q6_answer": "expected_slack_slots = 6\n",
         "q7_answer": "fp8_tokens = 1\n"}
CHEAT_SHADOW = "isinstance = lambda *a: True\ntuple = lambda r: (52, 6)\n"
LOOP = "while True:\n    pass\n"
STUBBORN = ("import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except KeyboardInterrupt:\n"
            "        pass\n")


def _src(cell):
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def _gid(cell):
    return cell["metadata"].get("nbgrader", {}).get("grade_id")


def solutions_by_cell(solution: dict) -> dict:
    """{answer grade_id: the solution's code without the BEGIN/END SOLUTION lines}."""
    return {_gid(c): re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n?", "", _src(c))
            for c in solution["cells"] if c["metadata"].get("nbgrader", {}).get("solution")}


def answered(release: dict, answers: dict) -> dict:
    nb = copy.deepcopy(release)
    for cell in nb["cells"]:
        if _gid(cell) in answers:
            cell["source"] = answers[_gid(cell)]
    return nb


def colab(nb: dict, strip_nbgrader: bool = False) -> dict:
    """What a Colab download looks like: nbformat 4.0, no cell ids, Colab's keys and personal data, CRLF."""
    nb = copy.deepcopy(nb)
    nb["nbformat_minor"] = 0
    nb["metadata"]["colab"] = {"provenance": [{"file_id": "1AbC", "user": {"displayName": "Ada Lovelace"}}],
                               "authorship_tag": "ABX9TyTOPSECRET"}
    first = next(c for c in nb["cells"] if _gid(c) == "q2_answer")
    first["source"] = _src(first).replace("\n", "\r\n")
    for i, cell in enumerate(nb["cells"]):
        cell.pop("id", None)
        for key in ("deletable", "editable", "trusted"):
            cell["metadata"].pop(key, None)
        if strip_nbgrader:
            cell["metadata"].pop("nbgrader", None)
        cell["metadata"]["id"] = f"x{i:04d}Colab"
        if cell["cell_type"] == "code":
            cell["metadata"]["colab"] = {"base_uri": "https://localhost:8080/"}
            cell["metadata"]["outputId"] = f"o{i:04d}-uuid"
            cell["metadata"]["executionInfo"] = {"status": "ok", "timestamp": 1764000000000, "user_tz": -60,
                                                 "user": {"displayName": "Ada Lovelace", "userId": "0123456789"},
                                                 "elapsed": 12}
    return nb


def build(release: dict, solution: dict) -> list[tuple[str, str, float | None, str]]:
    """(path, text, fair raw score, status word) for every file of the class folder."""
    good = solutions_by_cell(solution)
    full = float(sum(c["metadata"]["nbgrader"]["points"] for c in release["cells"]
                     if c["metadata"].get("nbgrader", {}).get("grade")
                     and not c["metadata"]["nbgrader"].get("solution")))
    pts = {_gid(c): c["metadata"]["nbgrader"]["points"] for c in release["cells"]
           if c["metadata"].get("nbgrader", {}).get("grade")}
    q7 = float(pts["q7_tests"])

    def perfect(**over):
        return answered(release, {**good, **over})

    def cheat(line):
        return answered(release, {**WRONG, "q1_answer": line + WRONG["q1_answer"]})

    no_q2_test = perfect()
    no_q2_test["cells"] = [c for c in no_q2_test["cells"] if _gid(c) != "q2_tests"]
    edited = perfect(q2_answer=WRONG["q2_answer"])
    next(c for c in edited["cells"] if _gid(c) == "q2_tests")["source"] = "pass\n"
    nbs = [
        ("perfect.ipynb", perfect(), full, "ok"),
        ("stub.ipynb", release, 0.0, "ok"),
        ("raises.ipynb", answered(release, {**good, "q7_answer": "raise ValueError('my bug')\n"}), full - q7, "ok"),
        ("looper.ipynb", perfect(q7_answer=LOOP + good["q7_answer"]), full - q7, "timed out"),
        ("stubborn.ipynb", perfect(q7_answer=STUBBORN + good["q7_answer"]), full - q7, "timed out"),
        ("oneline.ipynb", perfect(q6_answer=good["q6_answer"] + "print('x' * 50_000_000)\n"), full, "huge output"),
        ("manylines.ipynb", perfect(q6_answer=good["q6_answer"] + "print(('y' * 99 + '\\n') * 500_000)\n"), full,
         "huge output"),
        ("deleted_test.ipynb", no_q2_test, full, "cells missing"),
        # the locked q2 test is put back and fails; q3 and q4 are graded with a correct blocks_needed
        ("edited_test.ipynb", edited, full - pts["q2_tests"], "tampered"),
        ("missing_var.ipynb", perfect(q7_answer="fp8_token = 262_144\n"), full - q7, "ok"),
        ("bad_import.ipynb", perfect(q7_answer="import nonexistent_module\n" + good["q7_answer"]), full - q7, "ok"),
        ("sysexit.ipynb", perfect(q7_answer="import sys\nsys.exit(0)\n" + good["q7_answer"]), full - q7, "sys.exit"),
        ("osexit.ipynb", perfect(q7_answer="import os\nos._exit(1)\n" + good["q7_answer"]), full - q7, "kernel died"),
        # one bad answer costs one question: a fresh kernel replays the cells before it, and Q3-Q7 are graded
        ("early_exit.ipynb", perfect(q2_answer="import os\nos._exit(1)\n"), full - pts["q2_tests"], "kernel died"),
        ("cheat_override.ipynb", cheat(CHEAT_OVERRIDE), 0.0, "tampered"),
        ("cheat_patch.ipynb", cheat(CHEAT_PATCH_LIBRARY), 0.0, "tampered"),
        ("cheat_hide.ipynb", cheat(CHEAT_HIDE_ERRORS), 0.0, "tampered"),
        ("cheat_shadow.ipynb", cheat(CHEAT_SHADOW), 0.0, "tampered"),
        ("colab_ps2_math.ipynb", colab(perfect()), full, "ok"),
        ("ps2_math_colabbare.ipynb", colab(perfect(), strip_nbgrader=True), full, "ok"),
        ("zoe/ps2_math (1).ipynb", perfect(), full, "ok"),
    ]
    files = [(path, json.dumps(nb, indent=1), score, word) for path, nb, score, word in nbs]
    files.append(("notes.txt", "my notes, not a notebook\n", None, ""))
    files.append(("truncated.ipynb", json.dumps(perfect(), indent=1)[:5000], 0.0, "unreadable"))
    return files


def course_copy(root: Path, name: str) -> Path:
    """A course folder at ``root`` (created): nbgrader's config and one set's solution and release."""
    root.mkdir()
    shutil.copy(REPO / "nbgrader_config.py", root)
    for folder in ("solutions", "exercises"):
        shutil.copytree(REPO / folder / name, root / folder / name)
    return root
