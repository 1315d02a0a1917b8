#!/usr/bin/python3
"""strata-tierreplay on traces made here, whose answers are known:

- a working set that moves half-way through: the fixed oracle can hold only
  part of both halves, the look-ahead oracle follows the move, and the
  adaptive tier serves a good part of the I/O from SSD;
- a page-reference trace (big-endian 32-bit ids, as the ARC OLTP trace):
  its I/O count, footprint, reads, and span;
- bad input: a page id 0, a page trace ending inside an id, a CSV with a
  malformed record.

    tierreplay_test.py PATH/TO/strata-tierreplay
"""
import gzip
import random
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

EXTENT = 4 << 20
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (f": {detail}" if detail and not ok else ""))
    if not ok:
        failures.append(what)


def run(tool, *args):
    r = subprocess.run([tool, *args], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def moving_working_set(path, seed):
    """64 extents touched once at the start; then 300 s of 4 KiB random reads
    at 40 per second over extents 0-3, then 300 s over extents 32-35."""
    rng = random.Random(seed)
    lines = ["ts_us,vol,offset,size,op"]
    for e in range(64):
        lines.append(f"{e * 1000},0,{e * EXTENT},4096,R")
    t = 100_000
    for phase_first in (0, 32):
        end = t + 300_000_000
        while t < end:
            extent = phase_first + rng.randrange(4)
            offset = extent * EXTENT + rng.randrange(EXTENT // 4096) * 4096
            lines.append(f"{t},0,{offset},4096,{'W' if rng.random() < 0.3 else 'R'}")
            t += 25_000
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")


def placements(out):
    """{(tier %, placement): SSD I/O share} and the ratio lines."""
    rows = {}
    for m in re.finditer(r"^\s+(\d+)%\s+(oracle|lookahead|adaptive)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)",
                         out, re.M):
        rows[(int(m[1]), m[2])] = (float(m[3]), float(m[4]))
    ratios = [(float(a), float(b)) for a, b in
              re.findall(r"adaptive/oracle SSD I/Os ([\d.]+) \(goal >= 1\); adaptive/lookahead ([\d.]+)", out)]
    return rows, ratios


def main():
    tool = sys.argv[1]
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    with tempfile.TemporaryDirectory(prefix="tierreplay-test.") as d:
        d = Path(d)
        trace = d / "moving.csv.gz"
        moving_working_set(trace, seed)
        rc, out, err = run(tool, "--tier", "0.10", "--lookahead-s", "30", str(trace))
        print(out, err)
        check("the moving working set replays", rc == 0, err)
        rows, ratios = placements(out)
        check("three placements at 10%", set(rows) == {(10, "oracle"), (10, "lookahead"), (10, "adaptive")}, str(rows))
        if len(rows) == 3:
            oracle, lookahead, adaptive = rows[(10, "oracle")], rows[(10, "lookahead")], rows[(10, "adaptive")]
            check("the fixed oracle moves nothing during the trace", oracle[1] == 0.0, str(oracle))
            check("the look-ahead oracle follows the move: above the fixed one",
                  lookahead[0] > oracle[0] + 0.1, f"{lookahead[0]} vs {oracle[0]}")
            check("the look-ahead oracle moved extents", lookahead[1] > 0, str(lookahead))
            check("the adaptive tier serves a good part from SSD", adaptive[0] > 0.4, str(adaptive))
            check("the ratios are the shares' ratios", len(ratios) == 1 and
                  abs(ratios[0][0] - adaptive[0] / oracle[0]) < 0.02 and
                  abs(ratios[0][1] - adaptive[0] / lookahead[0]) < 0.02, str(ratios))

        pages = d / "pages.u32be.gz"
        ids = [1, 2, 3, 1, 1024, 1025, 2, 5000] * 50
        with gzip.open(pages, "wb") as f:
            f.write(b"".join(struct.pack(">I", i) for i in ids))
        rc, out, err = run(tool, "--tier", "0.5", str(pages))
        print(out, err)
        check("a page-reference trace replays", rc == 0, err)
        header = re.search(r"(\d+) I/Os over (\d+) s, (\d+) volumes, (\d+) extents of 4 MiB touched, "
                           r"host moved ([\d.]+) MB, (\d+)% reads", out)
        # spread evenly over the hour: the last one 1/400 of it before its end
        last_s = f"{3600 * (len(ids) - 1) / len(ids):.0f}"
        check("its header: I/Os, span, one volume, 3 extents (ids up to 5,000 pages), bytes, all reads",
              header is not None and header.groups() == (
                  str(len(ids)), last_s, "1", "3", f"{len(ids) * 4096 / 1e6:.1f}", "100"),
              header.groups() if header else out)

        zero = d / "zero.u32be"
        zero.write_bytes(struct.pack(">III", 1, 0, 2))
        rc, _, err = run(tool, str(zero))
        check("page id 0 is refused, saying so", rc == 1 and "page id 0" in err, err)
        torn = d / "torn.u32be"
        torn.write_bytes(struct.pack(">II", 1, 2) + b"\x00\x01")
        rc, _, err = run(tool, str(torn))
        check("a page trace ending inside a page id is refused, saying so", rc == 1 and "2 byte(s) of a page id" in err, err)
        bad = d / "bad.csv"
        bad.write_text("ts_us,vol,offset,size,op\n0,0,4096,4096,R\n1,0,x,4096,R\n")
        rc, _, err = run(tool, str(bad))
        check("a malformed record is refused with its line", rc == 1 and "bad.csv:3: malformed record" in err, err)
    if failures:
        print(f"{len(failures)} failed (seed {seed}): " + "; ".join(failures))
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
