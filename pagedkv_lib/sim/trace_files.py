"""Read and write a user's own request trace as JSONL or CSV.

One request per JSON line or CSV row, with these fields (the CSV header names them):

============== ======== =============================================================
field          required meaning
============== ======== =============================================================
``prompt_len``  yes      prompt tokens, including any shared prefix (>= 1)
``output_len``  yes      tokens the request generates (>= 1)
``prefix_id``   no       name or number of a shared prefix; empty or absent for none
``prefix_len``  with id  tokens of the prompt that are that prefix (>= 1, same for every row of an id)
``arrival_s``   no       arrival time in seconds (>= 0, e.g. unix time); all rows or none
============== ======== =============================================================

Token counts are whole numbers up to :data:`MAX_TOKENS`. An empty CSV cell, a JSON ``null`` and
a blank string count as absent. Files are UTF-8, with or without a byte-order mark (as Excel
writes CSV); spaces around CSV header names are ignored.

Rows are sorted by arrival (stably) because the simulator serves first come, first served.
A bad row raises ``ValueError`` naming the file, the line, the field, the bad value and what is
allowed; the loader builds the whole trace before returning, so a failure leaves nothing
half-loaded.
"""
from __future__ import annotations

import csv
import json
import math
import numbers
import os
import re

import numpy as np

from ..validation import check_int
from .workloads import Trace

FIELDS = ("prompt_len", "output_len", "prefix_id", "prefix_len", "arrival_s")
"""Fields a trace file may hold, in the order ``save_trace`` writes them."""

MAX_TOKENS = 2**31 - 1
"""Largest token count a trace file may give (far beyond any model's context)."""

_DIGITS = re.compile(r"[0-9]{1,19}")  # ASCII digits only: int() would choke on '²', which isdigit() accepts


def load_trace(path: str | os.PathLike, *, max_context: int | None = None) -> Trace:
    """Load a ``.jsonl`` or ``.csv`` trace; ``max_context`` (tokens, >= 2), if given, is checked per row."""
    if max_context is not None:
        max_context = check_int("max_context", max_context, minimum=2)
    path = os.fspath(path)
    kind = _kind(path)
    with open(path, newline="", encoding="utf-8-sig") as f:
        try:
            rows = list(_jsonl_rows(path, f) if kind == "jsonl" else _csv_rows(path, f))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e.reason}); save the file as UTF-8") from None
    if not rows:
        raise ValueError(f"{path}: no requests found")
    parsed = [_parse_row(path, line, row, max_context) for line, row in rows]
    has_arrival = [r["arrival_s"] is not None for r in parsed]
    if any(has_arrival) and not all(has_arrival):
        line = rows[has_arrival.index(not has_arrival[0])][0]
        raise ValueError(f"{path}:{line}: field 'arrival_s' must be given on every row or on none")
    prefix_numbers: dict[str, int] = {}
    prefix_lengths: dict[str, tuple[int, int]] = {}
    for (line, _), r in zip(rows, parsed):
        if r["prefix_id"] is None:
            continue
        seen = prefix_lengths.setdefault(r["prefix_id"], (r["prefix_len"], line))
        if seen[0] != r["prefix_len"]:
            raise ValueError(f"{path}:{line}: field 'prefix_len' is {r['prefix_len']} for prefix "
                             f"{r['prefix_id']!r}, but line {seen[1]} gave {seen[0]}")
        prefix_numbers.setdefault(r["prefix_id"], len(prefix_numbers))
    arrival = np.array([r["arrival_s"] or 0.0 for r in parsed])
    order = np.argsort(arrival, kind="stable")
    col = {name: np.array([parsed[i][name] for i in order]) for name in ("prompt_len", "output_len", "prefix_len")}
    pid = np.array([-1 if parsed[i]["prefix_id"] is None else prefix_numbers[parsed[i]["prefix_id"]] for i in order])
    return Trace(col["prompt_len"], col["output_len"].reshape(-1, 1), arrival[order], pid, col["prefix_len"],
                 max_context=max_context, name=os.path.basename(path))


def save_trace(trace: Trace, path: str | os.PathLike) -> None:
    """Write a one-sample trace as ``.jsonl`` or ``.csv`` (what ``load_trace`` reads back)."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a Trace, got {type(trace).__name__}")
    if trace.num_samples > 1 or trace.beam_width > 1:
        raise ValueError("only one-sample traces can be saved: the file format has one output_len per row")
    path = os.fspath(path)
    kind = _kind(path)
    rows = []
    for r in range(len(trace)):
        has_prefix = trace.prefix_id[r] >= 0
        rows.append({"prompt_len": int(trace.prompt_len[r]), "output_len": int(trace.output_len[r, 0]),
                     "prefix_id": int(trace.prefix_id[r]) if has_prefix else None,
                     "prefix_len": int(trace.prefix_len[r]) if has_prefix else None,
                     "arrival_s": float(trace.arrival_s[r])})
    with open(path, "w", newline="", encoding="utf-8") as f:
        if kind == "jsonl":
            for row in rows:
                f.write(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n")
        else:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows)


def _kind(path: str) -> str:
    lower = path.lower()
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    if lower.endswith(".csv"):
        return "csv"
    raise ValueError(f"trace file must end in .jsonl or .csv, got {path!r}")


def _present(value) -> bool:
    """False for what counts as an absent field: ``None`` (JSON null) and blank strings."""
    return value is not None and not (isinstance(value, str) and value.strip() == "")


def _jsonl_rows(path, f):
    for line, text in enumerate(f, start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except ValueError as e:  # JSONDecodeError, or an integer too long to convert
            raise ValueError(f"{path}:{line}: not valid JSON ({getattr(e, 'msg', e)})") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{line}: each line must be a JSON object, got {type(row).__name__}")
        yield line, {k: v for k, v in row.items() if _present(v)}


def _csv_rows(path, f):
    reader = csv.reader(f)
    try:
        header = next(reader, None)
        if header is None:
            return
        names = [name.strip() for name in header]
        for name in names:
            if name and names.count(name) > 1:
                raise ValueError(f"{path}:{reader.line_num}: header names field {name!r} twice")
        for values in reader:
            if not values:
                continue  # a blank line
            if len(values) > len(names):
                raise ValueError(f"{path}:{reader.line_num}: more values than header fields")
            yield reader.line_num, {k: v for k, v in zip(names, values) if _present(v)}
    except csv.Error as e:
        raise ValueError(f"{path}:{reader.line_num}: not valid CSV ({e})") from None


def _parse_row(path, line, row, max_context) -> dict:
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise ValueError(f"{path}:{line}: unknown field {unknown[0]!r}; fields are {', '.join(FIELDS)}")
    out = {}
    for name in ("prompt_len", "output_len"):
        if name not in row:
            raise ValueError(f"{path}:{line}: field {name!r} is missing")
        out[name] = _whole(path, line, name, row[name], minimum=1)
    pid = row.get("prefix_id")
    if pid is not None and (isinstance(pid, bool) or not isinstance(pid, (str, int))):
        raise ValueError(f"{path}:{line}: field 'prefix_id' must be a name (string) or a whole number, "
                         f"got {_show(pid)}")
    out["prefix_id"] = None if pid is None else str(pid).strip()
    if out["prefix_id"] is None:
        if "prefix_len" in row:
            raise ValueError(f"{path}:{line}: field 'prefix_len' is given without a prefix_id")
        out["prefix_len"] = 0
    else:
        if "prefix_len" not in row:
            raise ValueError(f"{path}:{line}: field 'prefix_len' is missing (prefix_id {pid!r} needs it)")
        out["prefix_len"] = _whole(path, line, "prefix_len", row["prefix_len"], minimum=1)
        if out["prefix_len"] > out["prompt_len"]:
            raise ValueError(f"{path}:{line}: field 'prefix_len' is {out['prefix_len']}, longer than "
                             f"prompt_len {out['prompt_len']}")
    out["arrival_s"] = None
    if "arrival_s" in row:
        value = row["arrival_s"]
        try:
            t = float(value) if isinstance(value, (str, numbers.Real)) and not isinstance(value, bool) else math.nan
        except (ValueError, OverflowError):
            t = math.nan
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"{path}:{line}: field 'arrival_s' must be a finite time >= 0 seconds, "
                             f"got {_show(value)}")
        out["arrival_s"] = t
    if max_context is not None and out["prompt_len"] + out["output_len"] > max_context:
        raise ValueError(f"{path}:{line}: field 'output_len' takes the request to "
                         f"{out['prompt_len'] + out['output_len']} tokens, beyond max_context={max_context}")
    return out


def _whole(path, line, name, value, *, minimum) -> int:
    """A token count in ``[minimum, MAX_TOKENS]`` from JSON (an int) or CSV (a string of ASCII digits)."""
    if isinstance(value, str):
        text = value.strip()
        number = int(text) if _DIGITS.fullmatch(text) else None
    else:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
    if number is None or not minimum <= number <= MAX_TOKENS:
        raise ValueError(f"{path}:{line}: field {name!r} must be a whole number of tokens in "
                         f"[{minimum}, {MAX_TOKENS}], got {_show(value)}")
    return number


def _show(value) -> str:
    """``repr(value)``, shortened if long (a 4,000-digit number would flood the message)."""
    try:
        text = repr(value)
    except ValueError:  # an integer with too many digits to print
        return f"a {type(value).__name__} too long to print"
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"
