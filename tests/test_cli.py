"""``python -m pagedkv_lib simulate``: a table by default, a figure on request, clear errors."""
import json
import os
import subprocess
import sys

import pytest

from pagedkv_lib.__main__ import main
from pagedkv_lib.sim import POLICIES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_with_no_arguments_it_serves_the_built_in_trace_under_every_policy():
    out = subprocess.run([sys.executable, "-m", "pagedkv_lib", "simulate"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "sharegpt-like: 1000 requests" in out.stdout and "OPT-13B" in out.stdout
    body = out.stdout.splitlines()[-len(POLICIES):]
    assert [line.split()[0] for line in body] == list(POLICIES)
    assert "20.4%" in out.stdout  # the paper's figure beside ours


def test_png_is_written(tmp_path, capsys):
    png = tmp_path / "fig.png"
    assert main(["simulate", "--requests", "80", "--png", str(png), "--no-progress"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in capsys.readouterr().out


def test_a_users_trace_file_with_sharing_options(tmp_path, capsys):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"prompt_len": 20 + i, "output_len": 30, "prefix_id": "sys",
                                          "prefix_len": 16}) for i in range(40)))
    code = main(["simulate", "--trace", str(path), "--samples", "3", "--independent-lengths",
                 "--policy", "paged+sharing", "--model", "Llama-2-7B", "--gpu-gib", "24", "--block-size", "8",
                 "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "mine.jsonl n=3 independent: 40 requests" in out and "blocks of 8" in out
    row = out.splitlines()[-1].split()
    assert row[0] == "paged+sharing" and float(row[7].rstrip("%")) > 0  # blocks saved by sharing


def test_beam_search_and_poisson_arrivals_run(capsys):
    assert main(["simulate", "--dataset", "alpaca", "--requests", "30", "--beam", "3", "--rate", "20",
                 "--policy", "paged", "--num-blocks", "400", "--no-progress"]) == 0
    assert "beam=3" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--gpu-gib", "10"], "error: no memory left for the KV cache"),
    (["simulate", "--block-size", "0"], "error: block_size must be an integer >= 1, got 0"),
    (["simulate", "--requests", "0"], "error: num_requests must be an integer >= 1, got 0"),
    (["simulate", "--model", "GPT-5"], "error: model must be a ModelSpec or one of OPT-13B"),
    (["simulate", "--trace", "missing.csv"], "error: [Errno 2] No such file or directory"),
])
def test_bad_input_exits_2_with_one_clear_line(argv, message, capsys):
    assert main(argv + ["--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_bad_trace_row_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "bad.csv"
    path.write_text("prompt_len,output_len\n10,5\n10,-5\n")
    assert main(["simulate", "--trace", str(path), "--no-progress"]) == 2
    assert "bad.csv:3: field 'output_len'" in capsys.readouterr().err


def test_unknown_policy_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "--policy", "lru"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'lru'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["simulate", "--prefixes", "3"], "error: --prefixes 3 needs --prefix-len TOKENS"),
    (["simulate", "--independent-lengths"], "error: --independent-lengths needs --samples N with N >= 2"),
    (["simulate", "--independent-lengths", "--samples", "1"],
     "error: --independent-lengths needs --samples N with N >= 2 (samples to draw lengths for), got --samples 1"),
    (["simulate", "--trace", "t.csv", "--requests", "5"], "error: --requests 5 picks a built-in trace, but --trace"),
    (["simulate", "--trace", "t.csv", "--dataset", "alpaca"], "error: --dataset alpaca picks a built-in trace"),
    (["simulate", "--prefix-len", "0"], "error: prefix_len must be an integer >= 1, got 0"),
])
def test_an_option_that_would_be_ignored_is_an_error(argv, message, capsys):
    assert main(argv + ["--no-progress"]) == 2  # refused before any trace is read or built
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_a_type_error_or_a_multi_line_message_still_exits_2_with_one_line(monkeypatch, capsys):
    import pagedkv_lib.__main__ as cli

    def broken(args):
        raise TypeError("max_context must be an integer,\ngot '100' (str)")
    monkeypatch.setattr(cli, "simulate_command", broken)
    assert main(["simulate"]) == 2
    assert capsys.readouterr().err == "error: max_context must be an integer, got '100' (str)\n"


@pytest.mark.parametrize("text, fragment", [
    ("prompt_len,output_len\n10,\u00b2\n", "field 'output_len' must be a whole number of tokens in [1, 2147483647]"),
    ('{"prompt_len": 100000000000000000000000000000, "output_len": 5}\n', "field 'prompt_len' must be a whole"),
])
def test_bad_numbers_in_a_trace_file_exit_2_naming_file_and_line(tmp_path, text, fragment, capsys):
    path = tmp_path / ("bad.csv" if text.startswith("prompt") else "bad.jsonl")
    path.write_text(text, encoding="utf-8")
    assert main(["simulate", "--trace", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}:2: " if path.suffix == ".csv" else f"error: {path}:1: ")
    assert fragment in err and err.count("\n") == 1


def test_a_trace_with_unix_times_and_a_bom_runs_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "excel.csv"
    path.write_text("prompt_len, output_len, arrival_s\n10,5,1700000000\n20,5,1700000001\n", encoding="utf-8-sig")
    assert main(["simulate", "--trace", str(path), "--policy", "paged", "--num-blocks", "80", "--block-size", "4",
                 "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].split()[-1] == "25"  # steps from the first arrival


@pytest.mark.parametrize("argv", [["--dataset", "alpaca"], ["--samples", "2"], ["--beam", "2"],
                                  ["--prefix-len", "80"], ["--model", "Llama-3-8B"]])
def test_the_papers_figures_appear_only_beside_a_run_in_the_papers_setting(argv, capsys):
    assert main(["simulate", "--requests", "60", "--policy", "max", "--no-progress", *argv]) == 0
    assert "20.4%" not in capsys.readouterr().out   # ShareGPT on OPT-13B figures, not this trace's
    assert main(["simulate", "--requests", "60", "--policy", "max", "--no-progress"]) == 0
    assert "20.4%" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--requests", "1" + "0" * 23], "error: --requests 100000000000... (24 digits) is too large: at most 10,000,000"),
    (["--num-blocks", "1" + "0" * 23, "--policy", "paged"], "error: --num-blocks 100000000000... (24 digits) is too"),
    (["--block-size", "2147483648", "--num-blocks", "4"], "error: --block-size 2147483648 is too large: at most "
                                                         "2,147,483,647 tokens"),
    (["--prefix-len", "1" + "0" * 23], "error: --prefix-len 100000000000... (24 digits) is too large"),
    (["--prefix-len", "8", "--prefixes", "3000000000"], "error: --prefixes 3000000000 is too large"),
    (["--samples", "1000"], "error: --samples 1000 runs more sequences per request than --max-batch 256"),
    (["--beam", "9", "--max-batch", "8"], "error: --beam 9 runs more sequences per request than --max-batch 8"),
])
def test_a_count_too_large_to_build_is_refused_in_one_line_before_building_anything(argv, message, capsys):
    assert main(["simulate", *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
