#!/usr/bin/python3
"""Replay a real block-I/O trace against a running array, through iSCSI.

    tools/tracereplay/tracereplay.py TRACE URL [--speedup X] [--max-ios N]
        [--start-s S] [--queue-depth N] [--prefill] [--map modulo|dense]
        [--spread-ties]

TRACE is one of /work/shared/traces/*.csv.gz (ts_us,vol,offset,size,op; the
format tools/tierreplay/trace.cc reads). URL is the LUN as qemu names it:
iscsi://127.0.0.1:3260/iqn.2026-11.io.strata:array/0.

Unlike strata-tierreplay, which drives the tiering engine in virtual time
over modelled drives, this goes through a running stratad: its iSCSI
target, write cache, read cache, heat tracking and migrator, in real time.
What it leaves behind is the pool's heat history, which `strata heat map`
and `strata heat report` draw (docs/heat-map.md, docs/heat-map-example/).

The initiator is one qemu-io process fed a command file: an aio_read or
aio_write per record, a `sleep` for the trace's gaps divided by --speedup,
and an aio_flush (which drains the I/Os in flight; it sends no SCSI flush)
every --queue-depth commands, so that up to that many are in flight. qemu-io
does not subtract its own time from the sleeps, so a run lasts at least the
trace's span over --speedup; the figures printed are measured, not planned.

Addresses: every record is widened to the 4 KiB blocks it touches (VMware
guests of the CloudPhysics trace are mostly 512 B off 4 KiB alignment), and
placed on the LUN by
  - modulo (default): the trace's byte address (volume v at v * 1 TiB for
    multi-volume traces) modulo the LUN's size, so nearby blocks stay
    nearby and an extent of the trace stays within 4 MiB of the LUN;
  - dense: the trace's touched 4 MiB extents packed in address order from
    the LUN's start (as strata-tierreplay does), when they fit.
A record that would run past the LUN's end is moved back to end there.

--prefill writes every extent the replay will touch once first (4 MiB,
in address order), so that the trace's reads find data: reads of
never-written extents are answered as zeros by the volume with no disk I/O,
and the migrator moves only mapped extents. Each prefill write heats its
extent by one I/O at most (a score of 1, below the migrator's promotion
threshold of 4).

Prints the figures as `key value` lines (and with --json one JSON object):
I/Os, reads, writes, bytes, trace seconds replayed, wall seconds, IOPS.
Exit status 0; 1 if qemu-io failed or reported an I/O error; 2 for a bad
command line.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

BLOCK_BYTES = 4096
EXTENT_BYTES = 4 << 20
VOLUME_STRIDE_BYTES = 1 << 40  # where a multi-volume trace's volume v starts, before the modulo


def read_trace(path, start_us, max_ios):
    """(ts_us, volume, offset, size, write) in time order, from start_us on, at most max_ios."""
    opener = gzip.open if path.endswith(".gz") else open
    records = []
    with opener(path, "rt") as f:
        header = f.readline().strip()
        if header != "ts_us,vol,offset,size,op":
            sys.exit("%s: not the ts_us,vol,offset,size,op CSV of /work/shared/traces (header %r)" % (path, header))
        for number, line in enumerate(f, 2):
            fields = line.rstrip("\r\n").split(",")
            if len(fields) != 5 or fields[4] not in ("R", "W"):
                sys.exit("%s:%d: malformed record: %s" % (path, number, line.strip()))
            ts, vol, offset, size = (int(x) for x in fields[:4])
            if size > 0:
                records.append((ts, vol, offset, size, fields[4] == "W"))
    records.sort(key=lambda r: r[0])  # Tencent's records are not in time order
    records = [r for r in records if r[0] >= start_us]
    return records[:max_ios] if max_ios else records


def spread_ties(records):
    """Records that share a timestamp spread evenly over the time to the next
    timestamp; the last group over its count times the trace's mean gap. For
    traces of coarse clocks (Tencent's: one second) that would otherwise be
    one burst per tick."""
    if len(records) < 2:
        return records
    mean_gap_us = max(1.0, (records[-1][0] - records[0][0]) / (len(records) - 1))
    out = []
    i = 0
    while i < len(records):
        j = i
        while j < len(records) and records[j][0] == records[i][0]:
            j += 1
        gap_us = records[j][0] - records[i][0] if j < len(records) else (j - i) * mean_gap_us
        for k in range(i, j):
            r = records[k]
            out.append((r[0] + int(gap_us * (k - i) / (j - i)),) + r[1:])
        i = j
    return out


def lun_bytes(url, qemu_img):
    out = subprocess.run([qemu_img, "info", "--output=json", "-f", "raw", url], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        sys.exit("qemu-img info %s: %s" % (url, out.stderr.strip()))
    return int(json.loads(out.stdout)["virtual-size"])


def place(records, lun, mapping):
    """(ts_us, lun offset, length, write) per record: 4 KiB-aligned, on the LUN."""
    def widened(r):
        ts, vol, offset, size, write = r
        address = vol * VOLUME_STRIDE_BYTES + offset
        first = address // BLOCK_BYTES * BLOCK_BYTES
        end = -(-(address + size) // BLOCK_BYTES) * BLOCK_BYTES
        return ts, first, end - first, write

    wide = [widened(r) for r in records]
    if mapping == "dense":
        touched = sorted({e for _, a, n, _ in wide for e in range(a // EXTENT_BYTES, (a + n - 1) // EXTENT_BYTES + 1)})
        if len(touched) * EXTENT_BYTES > lun:
            sys.exit("--map dense: the trace touches %d extents (%.1f GiB), more than the LUN's %.1f GiB; use --map modulo"
                     % (len(touched), len(touched) * EXTENT_BYTES / 2**30, lun / 2**30))
        dense = {e: i for i, e in enumerate(touched)}
        # Neighbouring extents of the trace stay neighbours, so a record across two stays contiguous.
        to_lun = lambda a: dense[a // EXTENT_BYTES] * EXTENT_BYTES + a % EXTENT_BYTES
    else:
        to_lun = lambda a: a % lun
    placed = []
    for ts, address, length, write in wide:
        length = min(length, lun)
        offset = to_lun(address)
        if offset + length > lun:
            offset = lun - length
        placed.append((ts, offset, length, write))
    return placed


def commands(placed, speedup, queue_depth, pattern):
    """qemu-io's command lines: the I/Os, the sleeps between them, a drain every queue_depth."""
    lines = []
    owed_ms = 0.0  # trace time not slept yet
    previous_us = placed[0][0] if placed else 0
    since_drain = 0
    for ts, offset, length, write in placed:
        owed_ms += (ts - previous_us) / 1000.0 / speedup
        previous_us = ts
        if owed_ms >= 1.0:
            lines.append("sleep %d" % int(owed_ms))
            owed_ms -= int(owed_ms)
        if write:
            lines.append("aio_write -q -P 0x%02x %d %d" % (pattern, offset, length))
        else:
            lines.append("aio_read -q %d %d" % (offset, length))
        since_drain += 1
        if since_drain == queue_depth:
            lines.append("aio_flush")
            since_drain = 0
    lines.append("aio_flush")
    return lines


def run_qemu_io(qemu_io, url, lines, work, name):
    """Runs one qemu-io over the command file; returns (wall seconds, output lines that report errors)."""
    path = os.path.join(work, name + ".qemu-io")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\nquit\n")
    started = time.monotonic()
    with open(path) as stdin:
        out = subprocess.run([qemu_io, "-f", "raw", url], stdin=stdin, capture_output=True, text=True)
    wall = time.monotonic() - started
    text = out.stdout + out.stderr
    errors = [l for l in text.splitlines() if "error" in l.lower() or "failed" in l.lower()]
    if out.returncode != 0 and not errors:
        errors = ["qemu-io exited with status %d" % out.returncode]
    return wall, errors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("trace", help="a ts_us,vol,offset,size,op CSV (gzipped or not)")
    p.add_argument("url", help="the LUN: iscsi://127.0.0.1:PORT/IQN/LUN")
    p.add_argument("--speedup", type=float, default=30.0, help="trace time / replay time (default 30)")
    p.add_argument("--max-ios", type=int, default=0, help="replay at most this many records (default: all)")
    p.add_argument("--start-s", type=float, default=0.0, help="start this far into the trace (seconds, default 0)")
    p.add_argument("--queue-depth", type=int, default=32,
                   help="I/Os issued between drains, so at most this many in flight (default 32)")
    p.add_argument("--spread-ties", action="store_true",
                   help="spread records that share a timestamp evenly up to the next one (coarse clocks: Tencent)")
    p.add_argument("--map", choices=("modulo", "dense"), default="modulo",
                   help="how trace addresses land on the LUN (default modulo)")
    p.add_argument("--prefill", action="store_true",
                   help="first write every extent the replay touches once (4 MiB writes in address order)")
    p.add_argument("--prefill-only", action="store_true", help="prefill, then stop (no replay)")
    p.add_argument("--lun-bytes", type=int, default=0, help="the LUN's size (default: asked with qemu-img info)")
    p.add_argument("--commands", metavar="FILE", help="also write the replay's qemu-io commands to FILE")
    p.add_argument("--dry-run", action="store_true", help="plan and print the figures, send nothing")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--qemu-io", default="qemu-io")
    p.add_argument("--qemu-img", default="qemu-img")
    a = p.parse_args()
    if a.speedup <= 0 or a.queue_depth < 1 or a.max_ios < 0 or a.start_s < 0:
        p.error("--speedup must be > 0, --queue-depth >= 1, --max-ios and --start-s >= 0")
    for tool in (a.qemu_io, a.qemu_img):
        if shutil.which(tool) is None:
            sys.exit("%s is missing (Debian: qemu-utils and qemu-block-extra, for iscsi://)" % tool)

    records = read_trace(a.trace, int(a.start_s * 1e6), a.max_ios)
    if not records:
        sys.exit("%s: no records from %g s on" % (a.trace, a.start_s))
    if a.spread_ties:
        records = spread_ties(records)
    lun = a.lun_bytes or lun_bytes(a.url, a.qemu_img)
    placed = place(records, lun, a.map)
    extents = sorted({e for _, o, n, _ in placed for e in range(o // EXTENT_BYTES, (o + n - 1) // EXTENT_BYTES + 1)})
    lines = commands(placed, a.speedup, a.queue_depth, 0x5a)
    if a.commands:
        with open(a.commands, "w") as f:
            f.write("\n".join(lines) + "\n")
    span_s = (placed[-1][0] - placed[0][0]) / 1e6
    figures = {
        "trace": os.path.basename(a.trace),
        "lun_bytes": lun,
        "map": a.map,
        "ios": len(placed),
        "reads": sum(1 for r in placed if not r[3]),
        "writes": sum(1 for r in placed if r[3]),
        "bytes": sum(r[2] for r in placed),
        "extents_touched": len(extents),
        "trace_start_s": placed[0][0] / 1e6,
        "trace_span_s": span_s,
        "speedup": a.speedup,
        "planned_s": span_s / a.speedup,
        "queue_depth": a.queue_depth,
    }
    errors = []
    if not a.dry_run:
        work = tempfile.mkdtemp(prefix="tracereplay-")
        try:
            if a.prefill or a.prefill_only:
                fill = []
                for i, e in enumerate(extents):
                    fill.append("aio_write -q -P 0x00 %d %d" % (e * EXTENT_BYTES, min(EXTENT_BYTES, lun - e * EXTENT_BYTES)))
                    if i % 8 == 7:
                        fill.append("aio_flush")
                fill.append("aio_flush")
                wall, errors = run_qemu_io(a.qemu_io, a.url, fill, work, "prefill")
                figures["prefill_extents"] = len(extents)
                figures["prefill_s"] = round(wall, 1)
                figures["prefill_mb_per_s"] = round(len(extents) * EXTENT_BYTES / 1e6 / wall, 1)
            if not a.prefill_only and not errors:
                started = time.time()
                wall, errors = run_qemu_io(a.qemu_io, a.url, lines, work, "replay")
                figures["started_unix_s"] = int(started)
                figures["wall_s"] = round(wall, 1)
                figures["iops"] = round(len(placed) / wall, 1)
                figures["mb_per_s"] = round(figures["bytes"] / 1e6 / wall, 2)
                figures["effective_speedup"] = float("%.3g" % (span_s / wall))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    figures["errors"] = len(errors)
    if a.json:
        print(json.dumps(figures))
    else:
        for k, v in figures.items():
            print(k, float("%.6g" % v) if isinstance(v, float) else v)
    for e in errors[:10]:
        print("error:", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
