"""checks.yours: test cells reach learner code through it, so every failure there reads as one line.

The learner's functions below live at module level, as an answer cell's do in the notebook's globals.
"""
from __future__ import annotations

import inspect
import json

import pytest
import torch

from pagedkv_lib.course.learner import checks


def kv_bytes_per_token(num_layers, num_kv_heads, head_dim, bytes_per_scalar):
    raise NotImplementedError()


def blocks_needed(num_tokens, block_size):
    block_size = 0  # a learner's slip
    return num_tokens // block_size


def parse_answer(text):
    return json.loads(text)  # raises deep inside the standard library


class Rigged(Exception):
    def __str__(self):
        raise RuntimeError("no message for you")


def rigged():
    raise Rigged()


def interrupted():
    raise KeyboardInterrupt


def leaves():
    raise SystemExit(3)


def gives_up():
    raise checks.CheckFailed("already one line")


class PagedAllocator:
    def __init__(self, num_blocks, block_size):
        self.num_blocks = num_blocks

    def num_free_blocks(self):
        return self.num_blocks

    def allocate(self, request_id, num_tokens):
        raise MemoryError(f"need {num_tokens} blocks")

    def free(self, request_id):
        raise NotImplementedError


not_a_function = 42


def _one_line(failure) -> str:
    shown = failure.value._render_traceback_()
    assert len(shown) == 1 and "\n" not in shown[0], shown
    assert "Traceback" not in shown[0] and 'File "' not in shown[0], shown
    return shown[0]


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_stub_says_it_is_not_written_yet_in_one_line():
    with pytest.raises(checks.NotWritten) as failure:
        checks.yours("kv_bytes_per_token")(3, 2, 64, 4)
    assert _one_line(failure) == ("CheckFailed: kv_bytes_per_token is not written yet: replace raise "
                                  "NotImplementedError() in its answer cell with your code and run that cell.")
    assert isinstance(failure.value, checks.CheckFailed)


def test_a_learners_error_names_the_call_the_exception_and_the_line():
    with pytest.raises(checks.CheckFailed) as failure:
        checks.yours("blocks_needed")(15, 4)
    line = _line_of(blocks_needed, "return num_tokens // block_size")
    assert _one_line(failure) == (f"CheckFailed: blocks_needed(15, 4) raised ZeroDivisionError: integer division "
                                  f"or modulo by zero (line {line}: return num_tokens // block_size)")
    assert not isinstance(failure.value, checks.NotWritten)


def test_the_line_shown_is_the_learners_even_when_the_error_comes_from_deeper_code():
    with pytest.raises(checks.CheckFailed) as failure:
        checks.yours("parse_answer")("not json")
    message = _one_line(failure)
    assert message.startswith("CheckFailed: parse_answer('not json') raised JSONDecodeError: Expecting value")
    assert message.endswith(f"(line {_line_of(parse_answer, 'json.loads')}: return json.loads(text)  "
                            "# raises deep inside the standard library)")


def test_an_exception_whose_str_raises_still_gives_one_line():
    with pytest.raises(checks.CheckFailed) as failure:
        checks.yours("rigged")()
    assert _one_line(failure).startswith("CheckFailed: rigged() raised Rigged: (its message could not be shown)")


@pytest.mark.parametrize("name, kind", [("interrupted", KeyboardInterrupt), ("leaves", SystemExit)])
def test_keyboard_interrupt_and_system_exit_pass_through(name, kind):
    with pytest.raises(kind):
        checks.yours(name)()


def test_a_check_failed_in_learner_code_is_kept_as_it_is():
    with pytest.raises(checks.CheckFailed, match="^already one line$"):
        checks.yours("gives_up")()


def test_a_missing_or_non_callable_answer_is_one_line():
    with pytest.raises(checks.NotWritten) as failure:
        checks.yours("slot_mapping")
    assert _one_line(failure).startswith("CheckFailed: slot_mapping is not defined yet: write it in its answer cell")
    with pytest.raises(checks.CheckFailed) as failure:
        checks.yours("not_a_function")
    assert _one_line(failure).startswith("CheckFailed: not_a_function should be a function, got 42")


def test_every_method_of_a_learners_class_is_covered():
    allocator = checks.yours("PagedAllocator")(8, 4)
    assert allocator.num_free_blocks() == 8 and allocator.num_blocks == 8  # values pass through unchanged
    with pytest.raises(checks.CheckFailed) as failure:
        allocator.allocate("a", 6)
    assert _one_line(failure).startswith("CheckFailed: PagedAllocator.allocate('a', 6) raised MemoryError: need 6 blocks (line ")
    with pytest.raises(checks.NotWritten, match="PagedAllocator.free is not written yet"):
        allocator.free("a")
    with pytest.raises(checks.CheckFailed) as failure:
        allocator.fork("a", "b")
    assert _one_line(failure) == "CheckFailed: PagedAllocator has no fork: the question's interface lists it."


def test_an_expected_raise_is_still_an_exception_but_a_stub_can_be_told_apart():
    """ps3's out-of-blocks test expects the allocator to raise; it lets NotWritten through."""
    allocator = checks.yours("PagedAllocator")(8, 4)
    for op, kind in (("allocate", checks.CheckFailed), ("free", checks.NotWritten)):
        with pytest.raises(Exception) as raised:
            getattr(allocator, op)("a", 6) if op == "allocate" else allocator.free("a")
        assert type(raised.value) is kind


def test_tensor_arguments_are_shown_by_shape_and_long_ones_cut():
    with pytest.raises(checks.CheckFailed) as failure:
        checks.yours("parse_answer")(torch.zeros(2, 3))
    assert _one_line(failure).startswith("CheckFailed: parse_answer(<Tensor of shape [2, 3]>) raised TypeError: ")
    with pytest.raises(checks.CheckFailed) as failure:
        checks.yours("parse_answer")([0] * 100)
    assert _one_line(failure).startswith("CheckFailed: parse_answer([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, "
                                         "0, 0, 0, 0,...) raised TypeError")


def _crash():
    import faulthandler
    import os
    import resource
    import signal
    faulthandler.disable()  # pytest's would print this child's stack on the way out
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # and no core dump of a large test process
    os.kill(os.getpid(), signal.SIGSEGV)  # what a store outside its tensor does to the launching process


def _hang():
    import time
    time.sleep(120)


def test_isolated_returns_the_result_and_turns_a_crash_or_an_error_into_one_line():
    assert checks.isolated("sum", sum, [1, 2, 3]) == 6
    with pytest.raises(checks.CheckFailed, match=r"^crash crashed the process \(SIGSEGV\): most likely a tl.store"):
        checks.isolated("crash", _crash)
    with pytest.raises(checks.CheckFailed, match=r"^parse raised JSONDecodeError"):
        checks.isolated("parse", parse_answer, "{")


def _children() -> set[int]:
    """This process's children, running or unreaped (from /proc)."""
    import os
    from pathlib import Path
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        if int(fields[1]) == os.getpid():
            found.add(int(stat.parent.name))
    return found


def test_isolated_stops_a_child_past_its_time_and_leaves_it_dead():
    import time
    before, start = _children(), time.monotonic()
    with pytest.raises(checks.CheckFailed, match=r"^hang ran past 1 s$"):
        checks.isolated("hang", _hang, timeout_s=1)
    assert time.monotonic() - start < 30  # the 120 s sleep was cut short
    assert _children() <= before, "the hung child is still running (or was never reaped)"


def _leave_a_grandchild(pid_file):
    import os
    import time
    if os.fork() == 0:  # holds the result pipe open, and would sleep for two minutes
        with open(pid_file, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
        os._exit(0)
    while not os.path.exists(pid_file) or not open(pid_file).read():
        time.sleep(0.01)
    return "done"


def test_isolated_returns_when_its_child_does_and_takes_the_grandchildren_with_it(tmp_path):
    import os
    import time
    start = time.monotonic()
    assert checks.isolated("fork", _leave_a_grandchild, str(tmp_path / "pid"), timeout_s=60) == "done"
    assert time.monotonic() - start < 30  # not held until the grandchild closes the pipe
    grandchild = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{grandchild}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break  # gone
        if state == "Z":
            break  # killed, waiting for its new parent to reap it
        time.sleep(0.05)
    else:
        raise AssertionError("the grandchild outlived the check")

