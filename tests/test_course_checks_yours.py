"""checks.yours: test cells reach learner code through it, so every failure there reads as one line.
And the one line blames no part that was right: slips that explain a wrong result are named, two at once
when only both do; a result no known slip explains is described (which outputs are wrong, which right).

The learner's functions below live at module level, as an answer cell's do in the notebook's globals.
"""
from __future__ import annotations

import inspect
import json
import math

import pytest
import torch

from pagedkv_lib.attention import batch as paged_batches
from pagedkv_lib.course.learner import checks
from pagedkv_lib.course.learner.pset_checks import ps3_code
from pagedkv_lib.course.learner.variants import for_set


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



# -- naming slips: two at once named both; none fitting says what the outputs show ----------------------

#: Two variants' keys (any 32 hex digits is a key): their hidden batches differ.
TWO_VARIANTS = ["0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"]


class _Record:
    """The few parts of a test cell's record the visible checks use, around plain Python functions."""

    checks = checks

    def __init__(self, **functions):
        self.functions = functions

    def yours(self, name):
        return checks.yours_in(self.functions, name)

    def reference(self, module, name):
        import importlib
        return getattr(importlib.import_module(module), name)


def _decode_with(*slips):
    """Q5's reference answer with some of its known slips made."""
    def paged_decode(q, k_cache, v_cache, block_tables, seq_lens):
        B, H_q, D = q.shape
        S, H_kv = k_cache.shape[1], k_cache.shape[2]
        out = torch.empty(B, H_q, D)
        for i in range(B):
            T = int(seq_lens[i]) - ("length" in slips)
            blocks = torch.arange(-(-T // S)) if "table" in slips else block_tables[i][: -(-T // S)].long()
            k = k_cache[blocks].reshape(-1, H_kv, D)[:T].float()
            v = v_cache[blocks].reshape(-1, H_kv, D)[:T].float()
            G = H_q // H_kv
            spread = (lambda x: x.repeat(1, G, 1)) if "modulo" in slips else (lambda x: x.repeat_interleave(G, dim=1))
            k, v = spread(k), spread(v)
            scores = torch.einsum("hd,thd->ht", q[i].float(), k) / (1.0 if "unscaled" in slips else math.sqrt(D))
            out[i] = torch.einsum("ht,thd->hd", torch.softmax(scores, dim=-1), v)
        return out
    return paged_decode


def _hidden_batches(key):
    """Q5's hidden batches for the variant ``key``, drawn as its test cell draws them."""
    seed = for_set("ps3_code", key).rng("q5").randrange(2**31)
    return [(f"a hidden batch (S={S}, H_kv={H_kv}, G={G})",
             paged_batches.random_paged_batch(paged_batches.boundary_lengths(S), block_size=S, num_kv_heads=H_kv,
                                              group=G, head_dim=16, seed=seed + i))
            for i, (S, H_kv, G) in enumerate([(4, 2, 1), (4, 2, 4), (16, 1, 8), (1, 2, 4), (8, 4, 2)])]


def _failures(decode, key):
    """{batch: message} for ``decode`` on ``key``'s hidden batches, as Q5's ``decode_check`` says it (None where
    right; the worked example, the same for every variant, is tested on its own)."""
    found = {}
    for what, batch in _hidden_batches(key):
        try:
            got = decode(*batch.args()).float()
            ps3_code.decode_diagnosis(checks, what, batch, got, ps3_code._own_attention(batch),
                                      lambda keys: ps3_code._attention(batch, keys), ps3_code.DECODE_SLIPS, "(NaN)")
            found[what] = None
        except checks.CheckFailed as failed:
            found[what] = str(failed)
    return found


def test_q5_worked_example_names_both_slips_through_the_test_cells_checks():
    with pytest.raises(checks.CheckFailed) as failure:
        ps3_code.q5_tests(_Record(paged_decode=_decode_with("modulo", "unscaled")))
    assert str(failure.value) == ("the worked example: two slips at once: (1) query head h must read KV head h // G "
                                  "(consecutive query heads share a KV head), not h % H_kv; (2) scale the scores by "
                                  "1 / sqrt(D) before the softmax.")
    checks_module, _, decode_check = ps3_code.q5_tests(_Record(paged_decode=_decode_with()))
    assert checks_module is checks and callable(decode_check)


@pytest.mark.parametrize("key", TWO_VARIANTS)
def test_q5_two_slips_at_once_are_both_named_and_the_right_gather_is_not_blamed(key):
    assert set(_failures(_decode_with(), key).values()) == {None}, "the reference answer passes"
    for what, message in _failures(_decode_with("modulo", "unscaled"), key).items():
        if "G=1)" in what or "H_kv=1," in what:  # there h % H_kv is h // G: only the scale is wrong
            assert message == f"{what}: scale the scores by 1 / sqrt(D) before the softmax.", message
        else:
            assert "two slips at once" in message and "h // G" in message and "1 / sqrt(D)" in message, message
        assert "gather" not in message and "table" not in message, message
    for message in _failures(_decode_with("unscaled", "length"), key).values():
        assert "two slips at once" in message and "1 / sqrt(D)" in message and "seq_lens[b] tokens" in message, message
    for message in _failures(_decode_with("modulo", "table"), key).values():
        assert "block_tables[b]" in message, message  # reading garbage, the heads may not show: NaN everywhere


@pytest.mark.parametrize("key", TWO_VARIANTS)
def test_q5_outputs_no_slip_explains_are_described_not_blamed_on_a_part(key):
    """A slip outside the catalogue (the outputs of requests whose length fills whole blocks are halved)
    gets what the outputs show: which requests are wrong, and that the others are right."""
    right = _decode_with()

    def halves_whole_block_requests(q, k_cache, v_cache, block_tables, seq_lens):
        out = right(q, k_cache, v_cache, block_tables, seq_lens)
        S = k_cache.shape[1]
        for i, T in enumerate(seq_lens.tolist()):
            if T % S == 0 and S > 1:
                out[i] = out[i] / 2
        return out

    for what, message in _failures(halves_whole_block_requests, key).items():
        if "S=1," in what:
            assert message is None
            continue
        assert "are wrong, those of requests" in message and "right (S=" in message, message
        assert "no known slip (head mapping, scale, length, block table) explains them" in message, message
        assert not any(text in message for text in ("gather", "h // G", "1 / sqrt(D)", "check the")), message


def test_name_slips_names_one_slip_alone_two_together_and_passes_when_none_fits():
    slips = {"a": "do A.", "b": "do B.", "c": "do C."}
    with pytest.raises(checks.CheckFailed, match=r"^x: do A\.$"):
        checks.name_slips("x", lambda keys: keys == {"a"}, slips)
    with pytest.raises(checks.CheckFailed, match=r"^x: two slips at once: \(1\) do A; \(2\) do C\.$"):
        checks.name_slips("x", lambda keys: keys == {"a", "c"}, slips)
    checks.name_slips("x", lambda keys: keys == {"a", "b", "c"}, slips)  # three at once: past ``most``


def test_q1_two_slips_at_once_are_both_named():
    table, positions, S = [7, 2, 9], [0, 3, 4, 9], 4
    found = dict((tuple(w), why) for w, why in ps3_code._slot_mistakes(table, positions, S))
    no_times_off_by_one = tuple(table[p // S] + p % S + 1 for p in positions)
    assert found[no_times_off_by_one].startswith("Two slips at once:") and "multiply" in found[no_times_off_by_one] \
        and "off by one" in found[no_times_off_by_one]


@pytest.mark.parametrize("shape", [(0, 1, 1, 1), (1,), (0,)])
def test_an_output_that_only_broadcasts_to_the_right_one_fails(shape):
    """An attack seen on 2026-12-03: the bonus's recorded result replaced by an empty tensor, which
    torch.allclose broadcasts against any output and calls equal."""
    what, batch = _hidden_batches(TWO_VARIANTS[0])[0]
    right = ps3_code._own_attention(batch)
    with pytest.raises(checks.CheckFailed, match="shaped like q"):
        ps3_code.decode_diagnosis(checks, what, batch, torch.zeros(shape) + right.flatten()[0], right,
                                  lambda keys: ps3_code._attention(batch, keys), ps3_code.DECODE_SLIPS, "(NaN)")
