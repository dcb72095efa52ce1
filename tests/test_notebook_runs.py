"""The tests' notebook runner reads a kernel reply that its first poll did not wake for (notebook_runs)."""
import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from queue import Empty

import nbformat
import pytest

from notebook_runs import in_slices, notebook_client

REPLY = {"parent_header": {"msg_id": "cell-1"}}


def run(coroutine):
    """``coroutine`` run to its end in a thread of its own: in the whole suite another test may have left an
    event loop running in this one (asyncio.run refuses then)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def missed_wake_up(arrives_after_polls: int):
    """A shell channel as it behaved: a reply that comes while a poll waits does not end that poll; only a
    poll that starts once it is there finds it. It comes during poll number ``arrives_after_polls``."""
    polls = []

    async def get_msg(timeout=None):
        polls.append(timeout)
        if len(polls) > arrives_after_polls:
            return REPLY
        await asyncio.sleep(0)   # the whole wait passes without a wake-up
        raise Empty
    return get_msg, polls


def test_a_reply_its_first_poll_missed_is_found_by_the_next_slice_not_at_the_timeout():
    get_msg, polls = missed_wake_up(arrives_after_polls=1)
    assert run(in_slices(get_msg, slice_s=0.5)(timeout=600)) == REPLY
    assert polls == [0.5, pytest.approx(0.5)]
    plain, plain_polls = missed_wake_up(arrives_after_polls=1)
    with pytest.raises(Empty):   # unsliced, the one poll waits the cell's whole timeout and ends with nothing
        run(plain(timeout=600))
    assert plain_polls == [600]


def test_no_reply_still_times_out_and_no_timeout_waits_on():
    get_msg, polls = missed_wake_up(arrives_after_polls=10**9)
    with pytest.raises(Empty):
        run(in_slices(get_msg, slice_s=0.01)(timeout=0.05))
    assert 1 <= len(polls) and all(t <= 0.01 for t in polls)
    forever, polls = missed_wake_up(arrives_after_polls=3)
    assert run(in_slices(forever, slice_s=0.01)(timeout=None)) == REPLY and polls == [0.01] * 4


@pytest.mark.slow
def test_a_notebook_runs_through_the_sliced_client(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(2.5)\nprint('slept')"),
                nbformat.v4.new_code_cell("import json\nfrom ipykernel.connect import get_connection_file\n"
                                          "info = json.load(open(get_connection_file()))\n"
                                          "print(info['transport'], info['ip'], get_connection_file())")]
    client = notebook_client(nb, tmp_path / "x.ipynb", timeout=30)
    client.execute()
    assert nb.cells[0].outputs[0]["text"] == "slept\n"
    transport, ip, connection_file = nb.cells[1].outputs[0]["text"].split()
    assert transport == "ipc"   # no TCP port chosen, so none another process can take before the kernel binds it
    assert Path(ip).parent == Path(connection_file).parent and Path(ip).parent.name.startswith("pkv-kernel-")
    assert not Path(ip).parent.exists()   # removed with the kernel


@pytest.mark.slow
def test_a_kernel_that_dies_mid_run_leaves_no_socket_folder(tmp_path, monkeypatch):
    import notebook_runs
    from nbclient.exceptions import DeadKernelError

    made, make = [], notebook_runs.socket_folder
    monkeypatch.setattr(notebook_runs, "socket_folder", lambda prefix: made.append(make(prefix)) or made[-1])
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import os\nos._exit(1)")]
    with pytest.raises(DeadKernelError):
        notebook_client(nb, tmp_path / "x.ipynb", timeout=30).execute()
    assert len(made) == 1 and not made[0].exists()
