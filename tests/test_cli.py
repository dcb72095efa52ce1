"""``python -m pagedkv_lib simulate``: a table by default, a figure on request, clear errors."""
import json
import os
import subprocess
import sys

import pytest

from pagedkv_lib.__main__ import main
from pagedkv_lib.simulate import POLICIES

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
