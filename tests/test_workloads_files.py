"""A user's own trace from JSONL or CSV: round trips, and errors that name the file, line and field."""
import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pagedkv_lib.sim.trace_files import load_trace, save_trace
from pagedkv_lib.sim.workloads import alpaca_like, poisson_arrivals, shared_prefix, trace_from_lengths


@st.composite
def traces(draw):
    n = draw(st.integers(1, 20))
    prompt = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    gaps = draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=n, max_size=n))
    groups = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n))
    lens = {g: draw(st.integers(1, 40)) for g in range(3)}
    plen = [min(lens[g], p) if g >= 0 else 0 for g, p in zip(groups, prompt)]
    # one prefix id, one length: clip each group's length to its shortest prompt
    for g in range(3):
        members = [i for i, x in enumerate(groups) if x == g]
        if members:
            m = min(plen[i] for i in members)
            for i in members:
                plen[i] = m
    return trace_from_lengths(prompt, output, arrival_s=np.cumsum(gaps), prefix_id=groups, prefix_len=plen)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), suffix=st.sampled_from([".jsonl", ".csv"]))
def test_save_then_load_gives_back_the_same_trace(tmp_path, trace, suffix):
    path = tmp_path / f"trace{suffix}"
    save_trace(trace, path)
    back = load_trace(path)
    for field in ("prompt_len", "output_len", "prefix_len"):
        assert np.array_equal(getattr(back, field), getattr(trace, field)), field
    assert np.allclose(back.arrival_s, trace.arrival_s)
    # prefix ids may be renumbered, but the grouping is the same
    same_before = trace.prefix_id[:, None] == trace.prefix_id[None, :]
    same_after = back.prefix_id[:, None] == back.prefix_id[None, :]
    assert np.array_equal(same_before, same_after)
    assert np.array_equal(back.prefix_id < 0, trace.prefix_id < 0)


def test_a_generated_trace_round_trips(tmp_path):
    trace = poisson_arrivals(shared_prefix(alpaca_like(200, seed=3), 80, num_prefixes=2), 5.0)
    save_trace(trace, tmp_path / "t.csv")
    back = load_trace(tmp_path / "t.csv", max_context=2048)
    assert np.array_equal(back.prompt_len, trace.prompt_len) and back.max_context == 2048


def test_rows_are_sorted_by_arrival_stably_and_prefix_names_become_ids(tmp_path):
    rows = [{"prompt_len": 5, "output_len": 2, "arrival_s": 2.0, "prefix_id": "sys", "prefix_len": 3},
            {"prompt_len": 6, "output_len": 3, "arrival_s": 1.0},
            {"prompt_len": 7, "output_len": 4, "arrival_s": 2.0, "prefix_id": "sys", "prefix_len": 3}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    trace = load_trace(path)
    assert trace.prompt_len.tolist() == [6, 5, 7]
    assert trace.arrival_s.tolist() == [1.0, 2.0, 2.0]
    assert trace.prefix_id[0] == -1 and trace.prefix_id[1] == trace.prefix_id[2] >= 0
    assert trace.prefix_len.tolist() == [0, 3, 3]


def test_arrivals_default_to_zero(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("prompt_len,output_len\n4,5\n6,7\n")
    trace = load_trace(path)
    assert trace.arrival_s.tolist() == [0.0, 0.0] and trace.output_len[:, 0].tolist() == [5, 7]


@pytest.mark.parametrize("name, text, match", [
    ("t.csv", "prompt_len,output_len\n4,5\n-3,2\n",
     "t.csv:3: field 'prompt_len' must be a whole number of tokens in [1, 2147483647], got '-3'"),
    ("t.csv", "prompt_len,output_len\n4,5\n3,2.5\n", "t.csv:3: field 'output_len' must be a whole number"),
    ("t.csv", "prompt_len,output_len\n4,5\n3,\n", "t.csv:3: field 'output_len' is missing"),
    ("t.csv", "prompt_len,output_len,promt\n4,5,1\n", "t.csv:2: unknown field 'promt'"),
    ("t.csv", "prompt_len,output_len\n4,5,6\n", "t.csv:2: more values than header fields"),
    ("t.csv", "prompt_len,output_len,arrival_s\n4,5,1\n4,5,\n",
     "t.csv:3: field 'arrival_s' must be given on every row or on none"),
    ("t.csv", "prompt_len,output_len,arrival_s\n4,5,-1\n", "t.csv:2: field 'arrival_s' must be a finite time >= 0"),
    ("t.csv", "prompt_len,output_len,prefix_id\n4,5,a\n", "t.csv:2: field 'prefix_len' is missing"),
    ("t.csv", "prompt_len,output_len,prefix_len\n4,5,2\n",
     "t.csv:2: field 'prefix_len' is given without a prefix_id"),
    ("t.csv", "prompt_len,output_len,prefix_id,prefix_len\n4,5,a,9\n",
     "t.csv:2: field 'prefix_len' is 9, longer than prompt_len 4"),
    ("t.csv", "prompt_len,output_len,prefix_id,prefix_len\n4,5,a,2\n4,5,a,3\n",
     "t.csv:3: field 'prefix_len' is 3 for prefix 'a', but line 2 gave 2"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5}\n{"prompt_len": 4, "output_len": true}\n',
     "t.jsonl:2: field 'output_len' must be a whole number of tokens in [1, 2147483647], got True"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5}\n\n{"prompt_len": 4\n', "t.jsonl:3: not valid JSON"),
    ("t.jsonl", '[4, 5]\n', "t.jsonl:1: each line must be a JSON object"),
    ("t.jsonl", '{"prompt_len": 40, "output_len": 5000}\n',
     "t.jsonl:1: field 'output_len' takes the request to 5040 tokens, beyond max_context=2048"),
    ("t.jsonl", "\n\n", "t.jsonl: no requests found"),
    ("t.txt", "prompt_len,output_len\n1,1\n", "trace file must end in .jsonl or .csv"),
    # A digit int() cannot read, a number too large for the arrays, or too long to parse at all
    ("t.csv", "prompt_len,output_len\n4,\u00b2\n",
     "t.csv:2: field 'output_len' must be a whole number of tokens in [1, 2147483647], got '\u00b2'"),
    ("t.csv", "prompt_len,output_len\n4,99999999999999999999999\n",
     "t.csv:2: field 'output_len' must be a whole number of tokens in [1, 2147483647], got '9999"),
    ("t.jsonl", '{"prompt_len": 100000000000000000000000000000, "output_len": 5}\n',
     "t.jsonl:1: field 'prompt_len' must be a whole number of tokens in [1, 2147483647], got 1000"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 1' + "0" * 5000 + '}\n',
     "t.jsonl:1: "),  # "not valid JSON (Exceeds the limit ...)" on Pythons that cap int digits
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5, "arrival_s": 1' + "0" * 400 + '}\n',
     "t.jsonl:1: field 'arrival_s' must be a finite time >= 0 seconds, got 1000"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5, "arrival_s": "soon"}\n',
     "t.jsonl:1: field 'arrival_s' must be a finite time >= 0 seconds, got 'soon'"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5, "prefix_id": [1], "prefix_len": 2}\n',
     "t.jsonl:1: field 'prefix_id' must be a name (string) or a whole number, got [1]"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5, "prefix_id": {"a": 1}, "prefix_len": 2}\n',
     "t.jsonl:1: field 'prefix_id' must be a name (string) or a whole number, got {'a': 1}"),
    ("t.jsonl", '{"prompt_len": 4, "output_len": 5, "prefix_id": true, "prefix_len": 2}\n',
     "t.jsonl:1: field 'prefix_id' must be a name (string) or a whole number, got True"),
    ("t.jsonl", '{"prompt_len": null, "output_len": 5}\n', "t.jsonl:1: field 'prompt_len' is missing"),
    ("t.csv", "prompt_len,output_len,prompt_len\n4,5,6\n", "t.csv:1: header names field 'prompt_len' twice"),
    ("t.csv", "prompt_len,output_len\n4,5\n4," + "5" * 200_000 + "\n",
     "t.csv:3: not valid CSV (field larger than field limit"),
])
def test_a_bad_row_names_the_file_line_and_field(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(match)):
        load_trace(path, max_context=2048)


def test_a_byte_order_mark_spaced_header_names_and_json_nulls_are_read(tmp_path):
    csv_path = tmp_path / "excel.csv"  # Excel's "CSV UTF-8": a BOM, and here spaces after the commas
    csv_path.write_text("prompt_len, output_len , arrival_s\n10, 5, 0\n12,6,1.5\n", encoding="utf-8-sig")
    trace = load_trace(csv_path)
    assert trace.prompt_len.tolist() == [10, 12] and trace.output_len[:, 0].tolist() == [5, 6]
    assert trace.arrival_s.tolist() == [0.0, 1.5]
    jsonl_path = tmp_path / "t.jsonl"
    jsonl_path.write_text('{"prompt_len": 4, "output_len": 5, "prefix_id": null, "prefix_len": null}\n'
                          '{"prompt_len": 6, "output_len": 5, "prefix_id": "sys", "prefix_len": 3}\n'
                          '{"prompt_len": 7, "output_len": 5, "prefix_id": "", "arrival_s": null}\n',
                          encoding="utf-8-sig")
    trace = load_trace(jsonl_path)
    assert trace.prefix_id[0] == -1 and trace.prefix_id[2] == -1 and trace.prefix_id[1] >= 0
    assert trace.prefix_len.tolist() == [0, 3, 0]


def test_a_file_that_is_not_utf8_names_the_file(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("prompt_len,output_len\n4,5\xff\n".encode("latin-1"))
    with pytest.raises(ValueError, match=re.escape(f"{path}: not UTF-8 text")):
        load_trace(path)


@pytest.mark.parametrize("max_context, error, match", [
    ("100", TypeError, "max_context must be an integer >= 2, got '100' (str)"),
    (1, ValueError, "max_context must be an integer >= 2, got 1"),
    (True, TypeError, "max_context must be an integer >= 2, got True (bool)"),
])
def test_max_context_is_checked_before_any_row(tmp_path, max_context, error, match):
    path = tmp_path / "t.csv"
    path.write_text("prompt_len,output_len\n4,5\n")
    with pytest.raises(error, match=re.escape(match)):
        load_trace(path, max_context=max_context)


def test_save_refuses_a_multi_sample_trace(tmp_path):
    from pagedkv_lib.sim.workloads import parallel_sampling
    with pytest.raises(ValueError, match="one-sample"):
        save_trace(parallel_sampling(alpaca_like(5), 2), tmp_path / "t.jsonl")
