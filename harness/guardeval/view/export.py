"""`guardeval export`: the run as a data frame, one row per scheduled call (`EXPORT_COLUMNS`),
as CSV, JSONL or Parquet (through pyarrow, the optional `parquet` extra).

Values are exactly what the run folder holds (cohort text included, unaltered): a CSV opened
in a spreadsheet shows cohort strings as they are.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any, BinaryIO

import orjson

from guardeval.errors import InputError
from guardeval.run.folder.folder import NotWritable, write_into
from guardeval.view.calls import EXPORT_COLUMNS, ExportColumn, RunCalls
from guardeval.view.files import out_file, report_folder

FORMATS = ("csv", "jsonl", "parquet")
ExportRow = dict[ExportColumn, object]   # a call row's export columns, in EXPORT_COLUMNS order
_INTS = ("repetition", "label", "decision", "attempts", "retry_round")
_FLOATS = ("score", "latency_s", "cost")


def export_rows(calls: RunCalls) -> list[ExportRow]:
    return [{c: r[c] for c in EXPORT_COLUMNS} for r in calls.rows]


def write_csv(rows: Iterable[ExportRow], fh: IO[str]) -> None:
    names: list[str] = list(EXPORT_COLUMNS)
    w = csv.DictWriter(fh, fieldnames=names, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})


def write_jsonl(rows: Iterable[ExportRow], fh: IO[bytes]) -> None:
    for r in rows:
        fh.write(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE))


def parquet_table(rows: list[ExportRow]) -> Any:
    try:
        import pyarrow as pa
    except ImportError:
        raise InputError("--format parquet needs pyarrow: pip install 'guardeval[parquet]'", field="format") from None
    types = {c: pa.int64() if c in _INTS else pa.float64() if c in _FLOATS else pa.string() for c in EXPORT_COLUMNS}
    columns = {}
    for c in EXPORT_COLUMNS:
        values = [r[c] for r in rows]
        try:
            columns[c] = pa.array(values, type=types[c])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
            raise InputError(f"a value does not fit the column type ({exc})", field=c) from None
    return pa.table(columns)


def export(calls: RunCalls, fmt: str, out: str | Path | None) -> Path | None:
    """Write the frame to `out` (default `<run>/calls.<fmt>`; a folder: `calls.<fmt>` in it; "-" is
    stdout for csv and jsonl). Returns the file written (None for stdout). A run folder that
    cannot be written (a read-only mount) without `out`: refused (InputError)."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})", field="format")
    rows = export_rows(calls)
    if out == "-":
        if fmt == "parquet":
            raise InputError("parquet is binary: give --out FILE", field="out")
        if fmt == "csv":
            write_csv(rows, sys.stdout)
        else:
            sys.stdout.flush()
            write_jsonl(rows, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        return None
    if out is not None and Path(out).is_dir():
        out = report_folder(out) / f"calls.{fmt}"   # a folder of its own, never another run's
    elif out is None and not calls.folder.writable():
        raise NotWritable(calls.run, f"calls.{fmt}")
    target = out_file(out, calls.run / f"calls.{fmt}") if out is not None else None
    table = parquet_table(rows) if fmt == "parquet" else None

    def write(fh: BinaryIO) -> None:
        if fmt == "csv":
            text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
            write_csv(rows, text)
            text.flush()
            text.detach()
        elif fmt == "jsonl":
            write_jsonl(rows, fh)
        else:
            import pyarrow.parquet as pq

            pq.write_table(table, fh)

    # Into the run folder by default (replaced, never through a link), else the --out file.
    if target is None:
        return write_into(calls.folder, f"calls.{fmt}", write)
    return write_into(target.parent, target.name, write)
