#!/usr/bin/python3
"""The published hybrid-array results, reproduced on Strata (README.md).

    tools/seedbench/seedbench.py [EXPERIMENT...] [--quick] [--long] [--repeat N] [--out DIR]
                                 [--stratad PATH] [--cli PATH]

EXPERIMENT: dothill, dothill-nowc, flashsoft, flashsoft-wb, directcache, vsan (default:
all). --long runs the vSAN soak for 3 hours (else 10 minutes). --quick
shortens every phase, for trying the suite, not for figures.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402
import plots  # noqa: E402
from harness import Array, BenchError, median_of, say, summary  # noqa: E402


class Phases:
    """How long each phase runs: the full suite's figures, or --quick's."""

    def __init__(self, quick, repeat):
        self.quick, self.repeat = quick, repeat
        self.warmup_s = 40 if quick else 240
        self.measure_s = 15 if quick else 45


# ---------------------------------------------------------------------------
# What every experiment does.

REPORT = []  # what the tables said, for report.md


def report(line=""):
    print(line, flush=True)
    REPORT.append(line)


def describe(r):
    return (f"{r['iops']:,.0f} IOPS, {r['latency_ms']:.2f} ms (reads {r['read_ms']:.2f}, writes {r['write_ms']:.2f}); "
            f"CPU: stratad {r['stratad_cores']:.2f} cores ({r['stratad_us_per_io']:.0f} µs/IO), "
            f"qemu {r['qsd_cores']:.2f}, machine {r['machine_busy']:.0%} busy")


def populate(a, size):
    t0 = time.monotonic()
    a.fio("populate", "--rw=write", "--bs=1m", "--iodepth=8", "--size=" + size)
    say(f"{a.name}: {size} written in {time.monotonic() - t0:.0f} s")


def warm_and_measure(a, phases, job, curve=None):
    """The warm-up (its per-second IOPS and the volume's statistics each
    second into `curve`), then `repeat` measured runs: their median."""
    say(f"{a.name}: warming up for {phases.warmup_s} s")
    with harness.Sampler(a) as sampler:
        _, logs = a.fio("warmup", *job, "--time_based", f"--runtime={phases.warmup_s}", logs=True)
    if curve is not None:
        curve["iops"] = harness.per_second_log(str(logs) + "_iops")[:-1]  # the last second is partial
        curve["stats"] = [(round(t, 1), s.get("cache_hit_fraction", 0.0), s.get("performance_tier_fraction", 0.0))
                          for t, s in sampler.samples]
    runs = []
    for i in range(phases.repeat):
        result, _ = a.fio(f"measure{i}", *job, "--time_based", f"--runtime={phases.measure_s}")
        runs.append(summary(result))
        say(f"{a.name}: run {i + 1}: {describe(runs[-1])}")
    figures = median_of(runs)
    stats = a.volume_stats()
    figures["cache_hit_fraction"] = stats.get("cache_hit_fraction", 0.0)
    figures["performance_tier_fraction"] = stats.get("performance_tier_fraction", 0.0)
    return figures


# ---------------------------------------------------------------------------
# 1. Dot Hill AssuredSAN 4824 (Demartek, 2015): SQL Server OLTP on 20 x 10K
#    HDDs in two RAID-6 groups; plus an SSD read cache; an SSD tier instead.

DOTHILL_PUBLISHED = {  # configuration: (IOPS, latency ms)
    "dothill-hdd": (5175, 18.0),
    "dothill-cache": (15450, 4.0),
    "dothill-tier": (23500, 2.0),  # "under 2 ms"
}
DOTHILL_DATA = "3338M"  # the 3.5 TB database, scaled down 1,000 times
# SQL Server OLTP: 8 KiB, about 95% reads, 30 users. The paper gives no
# queue depth, but its three points fit one closed loop: N I/O slots, each
# issuing its next I/O a think time Z after the last one completed, so that
# IOPS = N / (latency + Z). The all-HDD point (5,175 IOPS at 18 ms) and the
# tier's (23,500 at 2 ms) give N = 106 and Z = 2.52 ms; the model then
# predicts the read cache's point at 16,300 IOPS for its 4 ms, against the
# 15,450 published. So: 106 fio jobs of one I/O each with that think time,
# each its own NBD connection. Which pages are hot the paper does not say:
# 80% of the I/Os go to 20% of the data (fio's zoned distribution), the
# usual rule for OLTP.
OLTP_SLOTS = 106
OLTP = ["--rw=randrw", "--rwmixread=95", "--bs=8k", f"--numjobs={OLTP_SLOTS}", "--iodepth=1", "--thinktime=2520",
        "--thread", "--group_reporting", "--random_distribution=zoned:80/20:20/80", "--size=" + DOTHILL_DATA]


def dothill_run(ctx, suffix, name, what):
    """The three configurations, each config NAME + suffix."""
    results, curves = {}, {}
    for config in DOTHILL_PUBLISHED:
        with Array(config + suffix, ctx.workdir, ctx.stratad, ctx.cli) as a:
            populate(a, DOTHILL_DATA)
            if config == "dothill-tier":
                a.cli("volume", "update", "pools/p1/volumes/v1", "--affinity", "auto")
            curves[config] = {}
            results[config] = warm_and_measure(a, ctx.phases, OLTP, curves[config])
    base = results["dothill-hdd"]
    pub_base = DOTHILL_PUBLISHED["dothill-hdd"]
    rows = []
    for config, (pub_iops, pub_ms) in DOTHILL_PUBLISHED.items():
        r = results[config]
        rows.append({"configuration": config, "published_iops": pub_iops, "published_ms": pub_ms,
                     "published_iops_ratio": pub_iops / pub_base[0], "published_latency_ratio": pub_base[1] / pub_ms,
                     "iops": r["iops"], "latency_ms": r["latency_ms"], "read_p99_ms": r["read_p99_ms"],
                     "iops_ratio": r["iops"] / base["iops"], "latency_ratio": base["latency_ms"] / r["latency_ms"],
                     "cache_hit_fraction": r["cache_hit_fraction"],
                     "performance_tier_fraction": r["performance_tier_fraction"], "stratad_cores": r["stratad_cores"],
                     "machine_busy": r["machine_busy"], "read_ms": r["read_ms"], "write_ms": r["write_ms"],
                     # the think time the slots really took (fio sleeps past what it is asked)
                     "think_ms": OLTP_SLOTS / r["iops"] * 1e3 - r["latency_ms"]})
    report(f"\nDot Hill AssuredSAN 4824 (Demartek 2015), {what}, scaled 1:1000: 8 KiB OLTP, 95% reads, "
           f"106 I/O slots with 2.52 ms think time, 80/20 skew over {DOTHILL_DATA}, "
           f"median of {ctx.phases.repeat} x {ctx.phases.measure_s} s")
    report(f"{'configuration':<15}{'published':>22}{'ratio':>14}{'Strata':>24}{'ratio':>14}{'hits':>7}{'on SSD':>8}"
          f"{'stratad':>9}{'machine':>9}{'think':>7}")
    for r in rows:
        report(f"{r['configuration']:<15}{r['published_iops']:>9,} IOPS {r['published_ms']:>5.1f} ms"
              f"{r['published_iops_ratio']:>6.1f}x {r['published_latency_ratio']:>5.1f}x"
              f"{r['iops']:>9,.0f} IOPS {r['latency_ms']:>6.2f} ms"
              f"{r['iops_ratio']:>6.1f}x {r['latency_ratio']:>5.1f}x"
              f"{r['cache_hit_fraction']:>7.0%}{r['performance_tier_fraction']:>8.0%}"
              f"{r['stratad_cores']:>9.2f}{r['machine_busy']:>9.0%}{r['think_ms']:>7.2f}")
    report("(ratios: IOPS over the all-HDD baseline's, and the baseline's latency over this one's; hits: reads the"
          " cache served; on SSD: reads the SSD tier served; stratad: its CPU in cores; machine: all CPUs' busy share;"
           " think: the think time the slots took, ms, asked 2.52)")
    for r in rows[1:]:
        what = r["configuration"].removeprefix("dothill-")
        ctx.rows += [(name, f"{what}: IOPS over all-HDD", r["published_iops_ratio"], r["iops_ratio"]),
                     (name, f"{what}: latency reduction", r["published_latency_ratio"], r["latency_ratio"])]
    ctx.save("dothill" + suffix, {"rows": rows, "curves": curves})
    plots.ratio_bars(ctx.out / f"dothill{suffix}.png", f"Dot Hill AssuredSAN 4824 / Strata ({what}): OLTP over all-HDD",
                     [(r["configuration"].removeprefix("dothill-"), r["published_iops_ratio"], r["iops_ratio"],
                       r["published_latency_ratio"], r["latency_ratio"]) for r in rows[1:]])
    plots.warmup(ctx.out / f"dothill{suffix}-warmup.png",
                 f"Dot Hill OLTP ({what}): the warm-up of the cache and the tier",
                 {k.removeprefix("dothill-"): v for k, v in curves.items()})


def dothill(ctx):
    # The 4824 runs with its controllers' write-back cache: so does the pool
    # (a write log), in all three configurations
    dothill_run(ctx, "-wc", "Dot Hill 4824", "with the write cache")


def dothill_nowc(ctx):
    # The same without any write cache: every write a RAID-6 read-modify-write
    dothill_run(ctx, "", "Dot Hill, no WC", "no write cache")


# ---------------------------------------------------------------------------
# 2. FlashSoft 3.7, write-through: fio 4 KiB random, 70% reads, with and
#    without the SSD cache; and VM density, how many such workloads run at
#    the baseline's latency with the cache.

FLASHSOFT_PUBLISHED = {"iops_ratio": 2.4, "latency_ratio": 2.9, "density": 8}
VM_BYTES = "256m"  # each workload ("VM") its own region of the volume
VM_STEPS = (1, 2, 4, 8)


def vms(n, seconds, ramp=0):
    """n workloads of 4 KiB random I/O, 70% reads, 8 in flight, each over
    its own VM_BYTES of the volume."""
    job = ["--rw=randrw", "--rwmixread=70", "--bs=4k", "--iodepth=8", f"--numjobs={n}", "--thread", "--group_reporting",
           "--size=" + VM_BYTES, "--offset_increment=" + VM_BYTES, "--time_based", f"--runtime={seconds}"]
    return job + ([f"--ramp_time={ramp}"] if ramp else [])


# The array behind FlashSoft's tests is not described; two readings of it:
# the HDDs with no write cache (every write a RAID-6 read-modify-write),
# and the HDDs behind the array's own write cache (the pool's write log).
FLASHSOFT_VARIANTS = (("RAID-6 written through", "hdd10", "hdd10-cache"),
                      ("behind the array's write cache", "hdd10-wlog", "hdd10-cache-wlog"))


def flashsoft_variant(ctx, what, hdd, cached_config):
    ph = ctx.phases
    results = {}
    for config in (hdd, cached_config):
        with Array(config, ctx.workdir, ctx.stratad, ctx.cli) as a:
            populate(a, "2G")
            if config == cached_config:
                say(f"{a.name}: warming one workload's region for {ph.warmup_s // 2} s")
                a.fio("warmup", *vms(1, ph.warmup_s // 2))
            runs = [summary(a.fio(f"single{i}", *vms(1, ph.measure_s))[0]) for i in range(ph.repeat)]
            single = median_of(runs)
            single["cache_hit_fraction"] = a.volume_stats().get("cache_hit_fraction", 0.0)
            say(f"{a.name}: one workload: {describe(single)}")
            steps = []
            if config == cached_config:
                for n in VM_STEPS:
                    r = summary(a.fio(f"vms{n}", *vms(n, ph.measure_s + 10, ramp=10))[0])
                    r["cache_hit_fraction"] = a.volume_stats().get("cache_hit_fraction", 0.0)
                    steps.append((n, r))
                    say(f"{a.name}: {n} workloads: {describe(r)}, {r['cache_hit_fraction']:.0%} hits")
            results[config] = {"single": single, "steps": steps}
    base, cached = results[hdd]["single"], results[cached_config]["single"]
    iops_ratio, latency_ratio = cached["iops"] / base["iops"], base["latency_ms"] / cached["latency_ms"]
    # VM density: the most workloads whose mean latency stays within the
    # baseline's (one workload on the HDDs alone)
    density = max([n for n, r in results[cached_config]["steps"] if r["latency_ms"] <= base["latency_ms"]], default=0)
    report(f"\nFlashSoft 3.7 write-through, {what}: fio 4 KiB random, 70% reads, 8 in flight per workload over "
           f"{VM_BYTES} each, median of {ph.repeat} x {ph.measure_s} s")
    report(f"  all-HDD:        {describe(base)}")
    report(f"  with the cache: {describe(cached)}; {cached['cache_hit_fraction']:.0%} of reads hit")
    report(f"  IOPS {iops_ratio:.1f}x (published {FLASHSOFT_PUBLISHED['iops_ratio']}x), "
           f"latency {latency_ratio:.1f}x lower (published {FLASHSOFT_PUBLISHED['latency_ratio']}x)")
    report(f"  workloads at the baseline's latency ({base['latency_ms']:.2f} ms) with the cache: {density} "
           f"(published {FLASHSOFT_PUBLISHED['density']}x)")
    for n, r in results[cached_config]["steps"]:
        report(f"    {n} workloads: {describe(r)}; {r['cache_hit_fraction']:.0%} hits")
    label = "FlashSoft WT" + (" +wc" if "wlog" in hdd else "")
    ctx.rows += [(label, "IOPS over all-HDD", FLASHSOFT_PUBLISHED["iops_ratio"], iops_ratio),
                 (label, "latency reduction", FLASHSOFT_PUBLISHED["latency_ratio"], latency_ratio),
                 (label, "workloads at baseline latency", FLASHSOFT_PUBLISHED["density"], density)]
    return {"what": what, "results": results, "iops_ratio": iops_ratio, "latency_ratio": latency_ratio,
            "density": density, "baseline_ms": base["latency_ms"]}


def flashsoft(ctx):
    variants = [flashsoft_variant(ctx, *v) for v in FLASHSOFT_VARIANTS]
    ctx.save("flashsoft", {"variants": variants})
    plots.density(ctx.out / "flashsoft-density.png", "FlashSoft 3.7 / Strata: workloads added with the read cache",
                  {v["what"]: ([(n, r["iops"], r["latency_ms"]) for n, r in v["results"][c]["steps"]], v["baseline_ms"])
                   for v, (_, _, c) in zip(variants, FLASHSOFT_VARIANTS)})


# ---------------------------------------------------------------------------
# 3. FlashSoft 3.8, write-back: a TPC-C-like OLTP database, TPS with the SSD
#    caching writes as well as reads against all-HDD.

FLASHSOFT_WB_PUBLISHED = {"low": 3.36, "high": 5.01}  # TPS over all-HDD, the paper's range
NEW_ORDER = Path(__file__).resolve().parent / "pgbench" / "new-order.sql"
# The database, about 15 MB per unit of scale: 0.8 GB at 50, with the WAL
# (held to 256 MB, harness.Postgres) most of the 2 GiB volume, and the
# server held to 256 MiB of memory: most reads miss its caches and reach
# the array, as for a database that outgrew its server's memory. The SSD
# read cache (762 MiB) can hold most of it.
PGBENCH_SCALE, PGBENCH_QUICK_SCALE = 50, 10
PGBENCH_MEMORY_BYTES = 256 << 20
PGBENCH_CLIENTS = 8


def tpcc_like(seconds):
    """pgbench in TPC-C's proportions: New-Order 45% (new-order.sql),
    Payment 43% (pgbench's TPC-B-like: the same updates of a warehouse, a
    district and a customer, and a history row), and the read-only
    Order-Status and Stock-Level 12% (select-only)."""
    return ["-c", PGBENCH_CLIENTS, "-j", 2, "-T", seconds, "-f", f"{NEW_ORDER}@45", "-b", "tpcb-like@43",
            "-b", "select-only@12"]


def pgbench_figures(out):
    """TPS and mean latency (ms) from pgbench's summary."""
    tps = latency = None
    for line in out.splitlines():
        if line.startswith("tps = "):
            tps = float(line.split()[2])
        elif line.startswith("latency average = "):
            latency = float(line.split()[3])
    if tps is None or latency is None:
        raise BenchError("pgbench printed no TPS: " + out[-1000:])
    return {"tps": tps, "latency_ms": latency}


def flashsoft_wb(ctx):
    ph = ctx.phases
    scale = PGBENCH_QUICK_SCALE if ph.quick else PGBENCH_SCALE
    results = {}
    for config in ("hdd10", "hdd10-cache-wlog"):
        with Array(config, ctx.workdir, ctx.stratad, ctx.cli, export="fuse") as a, \
                harness.Postgres(a, PGBENCH_MEMORY_BYTES) as db:
            t0 = time.monotonic()
            db.client("pgbench", "-i", "-q", "-s", scale)
            say(f"{a.name}: pgbench scale {scale} loaded in {time.monotonic() - t0:.0f} s")
            say(f"{a.name}: warming up for {ph.warmup_s // 2} s")
            db.client("pgbench", *tpcc_like(ph.warmup_s // 2))
            runs = []
            for i in range(ph.repeat):
                db.client("psql", "-qc", "checkpoint")  # each run starts with no dirty pages in shared buffers
                cpu0, t0, io0 = a.cpu_seconds(), time.monotonic(), a.volume_stats()
                r = pgbench_figures(db.client("pgbench", *tpcc_like(ph.measure_s)))
                cpu1, elapsed, io1 = a.cpu_seconds(), time.monotonic() - t0, a.volume_stats()
                transactions = r["tps"] * ph.measure_s
                r["array_reads_per_txn"] = (int(io1.get("reads", 0)) - int(io0.get("reads", 0))) / transactions
                r["array_writes_per_txn"] = (int(io1.get("writes", 0)) - int(io0.get("writes", 0))) / transactions
                # the volume's own latency, submit to completion, over its last 5 s sample
                r["array_read_ms"], r["array_write_ms"] = io1.get("read_latency_ms", 0.0), io1.get("write_latency_ms", 0.0)
                r["stratad_cores"] = (cpu1["stratad"] - cpu0["stratad"]) / elapsed
                r["machine_busy"] = (cpu1["busy"] - cpu0["busy"]) / max(1e-9, cpu1["total"] - cpu0["total"])
                runs.append(r)
                say(f"{a.name}: run {i + 1}: {r['tps']:,.0f} TPS, {r['latency_ms']:.1f} ms; the array's reads "
                    f"{r['array_reads_per_txn']:.1f} ({r['array_read_ms']:.2f} ms) and writes "
                    f"{r['array_writes_per_txn']:.1f} ({r['array_write_ms']:.2f} ms) per transaction")
            figures = median_of(runs)
            figures["cache_hit_fraction"] = a.volume_stats().get("cache_hit_fraction", 0.0)
            results[config] = figures
    base, cached = results["hdd10"], results["hdd10-cache-wlog"]
    ratio = cached["tps"] / base["tps"]
    report(f"\nFlashSoft 3.8 write-back: PostgreSQL, pgbench in TPC-C's mix (scale {scale}, {PGBENCH_CLIENTS} clients), "
           f"on ext4 on the LUN, median of {ph.repeat} x {ph.measure_s} s")
    for label, r in (("all-HDD:                  ", base), ("SSD caching reads+writes: ", cached)):
        report(f"  {label}{r['tps']:,.0f} TPS, {r['latency_ms']:.1f} ms per transaction; the array's reads "
               f"{r['array_reads_per_txn']:.1f} ({r['array_read_ms']:.2f} ms) and writes "
               f"{r['array_writes_per_txn']:.1f} ({r['array_write_ms']:.2f} ms) per transaction; "
               f"stratad {r['stratad_cores']:.2f} cores, machine {r['machine_busy']:.0%} busy")
    report(f"  the read cache served {cached['cache_hit_fraction']:.0%} of reads (the array's last 5 s sample)")
    report(f"  TPS {ratio:.2f}x (published {FLASHSOFT_WB_PUBLISHED['low']}-{FLASHSOFT_WB_PUBLISHED['high']}x), "
           f"latency {base['latency_ms'] / cached['latency_ms']:.2f}x lower")
    ctx.rows += [("FlashSoft WB", "TPS over all-HDD (low end)", FLASHSOFT_WB_PUBLISHED["low"], ratio)]
    ctx.save("flashsoft-wb", {"scale": scale, "results": results, "ratio": ratio})
    plots.speedup(ctx.out / "flashsoft-wb.png", "FlashSoft 3.8 write-back / Strata: PostgreSQL in TPC-C's mix",
                  (FLASHSOFT_WB_PUBLISHED["low"], FLASHSOFT_WB_PUBLISHED["high"]), ratio)


# ---------------------------------------------------------------------------
# 4. Fusion-io directCache in front of an iSCSI array: a working set the
#    cache holds, read at random: IOPS and latency against the array alone,
#    and the warm-up from a cold cache.

DIRECTCACHE_PUBLISHED = {"iops_ratio": 17.0, "latency_ratio": 22.0}
WORKING_SET = "512m"  # fits the 762 MiB cache
READS = ["--rw=randread", "--bs=4k", "--numjobs=4", "--iodepth=4", "--thread", "--group_reporting",
         "--size=" + WORKING_SET]


def directcache(ctx):
    ph = ctx.phases
    results, curve = {}, {}
    for config in ("hdd10", "hdd10-cache"):
        with Array(config, ctx.workdir, ctx.stratad, ctx.cli) as a:
            populate(a, WORKING_SET)
            results[config] = warm_and_measure(a, ph, READS, curve if config == "hdd10-cache" else None)
    base, cached = results["hdd10"], results["hdd10-cache"]
    iops_ratio, latency_ratio = cached["iops"] / base["iops"], base["read_ms"] / cached["read_ms"]
    report(f"\ndirectCache: 4 KiB random reads, 16 in flight, over a {WORKING_SET} working set, "
          f"median of {ph.repeat} x {ph.measure_s} s after {ph.warmup_s} s of warm-up")
    report(f"  the array alone: {describe(base)}")
    report(f"  with the cache:  {describe(cached)}; {cached['cache_hit_fraction']:.0%} of reads hit")
    report(f"  read IOPS {iops_ratio:.1f}x (published {DIRECTCACHE_PUBLISHED['iops_ratio']:.0f}x), "
          f"read latency {latency_ratio:.1f}x lower (published {DIRECTCACHE_PUBLISHED['latency_ratio']:.0f}x)")
    ctx.rows += [("directCache", "read IOPS over the array", DIRECTCACHE_PUBLISHED["iops_ratio"], iops_ratio),
                 ("directCache", "read latency reduction", DIRECTCACHE_PUBLISHED["latency_ratio"], latency_ratio)]
    ctx.save("directcache", {"results": results, "curve": curve})
    plots.warmup(ctx.out / "directcache-warmup.png", "directCache / Strata: 4 KiB random reads from a cold cache",
                 {"cache": curve}, baseline_iops=base["iops"])


# ---------------------------------------------------------------------------
# 5. VMware vSAN with SQL Server: latency flat over hours at a steady load
#    (a soak: --long makes it 3 hours), and IOPS as workloads are added
#    until the array saturates.

VSAN_WORKLOADS = (1, 2, 4, 6, 8, 12, 16)
VSAN_REGION = "208m"  # each workload's own database: 16 of them fill the 3.5 GB


def sql_vms(n, seconds, ramp=0, rate_iops=0):
    """n SQL Server-like workloads (the Dot Hill OLTP mix, 8 in flight each),
    each over its own region; `rate_iops`: each one held to that rate."""
    job = ["--rw=randrw", "--rwmixread=95", "--bs=8k", "--iodepth=8", f"--numjobs={n}", "--thread", "--group_reporting",
           "--random_distribution=zoned:80/20:20/80", "--size=" + VSAN_REGION, "--offset_increment=" + VSAN_REGION,
           "--time_based", f"--runtime={seconds}"]
    # A rate per direction, in the mix's proportions: one cap for both would
    # let fio issue writes in place of throttled reads.
    rate = [f"--rate_iops={max(1, round(rate_iops * 0.95))},{max(1, round(rate_iops * 0.05))}"] if rate_iops else []
    return job + ([f"--ramp_time={ramp}"] if ramp else []) + rate


def minute_latencies(prefix):
    """fio's per-job latency logs averaged per minute (PREFIX_clat.N.log):
    {direction: [(minute, mean ms over the jobs)]}, 0 reads, 1 writes."""
    sums = {}
    for path in Path(prefix).parent.glob(Path(prefix).name + "_clat.*.log"):
        for line in path.read_text().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) >= 3:
                key = (int(f[2]), round(int(f[0]) / 60000))
                total, count = sums.get(key, (0, 0))
                sums[key] = (total + int(f[1]), count + 1)
    out = {}
    for (direction, minute), (total, count) in sorted(sums.items()):
        out.setdefault(direction, []).append((minute, total / count / 1e6))
    return out


def vsan(ctx):
    ph = ctx.phases
    soak_s = 3 * 3600 if ctx.long else (120 if ph.quick else 600)
    with Array("vsan", ctx.workdir, ctx.stratad, ctx.cli) as a:
        populate(a, DOTHILL_DATA)
        a.cli("volume", "update", "pools/p1/volumes/v1", "--affinity", "auto")
        say(f"{a.name}: warming up for {ph.warmup_s} s")
        a.fio("warmup", *sql_vms(max(VSAN_WORKLOADS), ph.warmup_s))
        steps = []
        for n in VSAN_WORKLOADS:
            r = summary(a.fio(f"vms{n}", *sql_vms(n, ph.measure_s + 10, ramp=10))[0])
            steps.append((n, r))
            say(f"{a.name}: {n} workloads: {describe(r)}")
        # Saturation: the fewest workloads that reach 95% of the peak. The
        # soak runs at half the peak, as a steady production load would.
        peak = max(r["iops"] for _, r in steps)
        saturated = next(n for n, r in steps if r["iops"] >= 0.95 * peak)
        soak_vms = 8
        per_vm = max(1, int(peak / 2 / soak_vms))
        say(f"{a.name}: soak for {soak_s} s: {soak_vms} workloads at {per_vm} IOPS each")
        result, _ = a.fio("soak", *sql_vms(soak_vms, soak_s, rate_iops=per_vm),
                          "--write_lat_log=" + str(a.dir / "soak"), "--log_avg_msec=60000")
        soak = summary(result)
        minutes = minute_latencies(a.dir / "soak")
    reads = [ms for _, ms in minutes.get(0, [])[:-1]]  # the last minute is partial
    spread = {"min_ms": min(reads), "max_ms": max(reads), "mean_ms": statistics.mean(reads),
              "stdev_ms": statistics.pstdev(reads)} if reads else {}
    report(f"\nvSAN-like: the Dot Hill array with its SSD tier and a write log; SQL Server-like workloads "
          f"(8 KiB OLTP, 95% reads, 8 in flight each, each over its own {VSAN_REGION})")
    report("IOPS as workloads are added:")
    for n, r in steps:
        report(f"    {n:>2} workloads: {describe(r)}")
    report(f"  saturated at {saturated} workloads ({peak:,.0f} IOPS at the peak)")
    report(f"soak: {soak_vms} workloads at {per_vm} IOPS each (half the peak), {soak_s / 60:.0f} minutes: "
          f"{soak['iops']:,.0f} IOPS, {soak['latency_ms']:.2f} ms mean")
    if spread:
        report(f"  read latency per minute: {spread['min_ms']:.2f} to {spread['max_ms']:.2f} ms, "
              f"mean {spread['mean_ms']:.2f}, standard deviation {spread['stdev_ms']:.2f} "
              f"({spread['stdev_ms'] / spread['mean_ms']:.0%} of the mean), over {len(reads)} minutes")
    ctx.save("vsan", {"steps": steps, "saturated": saturated, "soak": soak, "soak_seconds": soak_s,
                      "per_minute": minutes, "spread": spread})
    plots.scaling(ctx.out / "vsan-scaling.png", "vSAN-like SQL Server workloads on Strata: IOPS as workloads are added",
                  [(n, r["iops"], r["latency_ms"]) for n, r in steps])
    plots.soak(ctx.out / "vsan-soak.png", f"Strata at a steady load for {soak_s / 60:.0f} minutes: latency per minute",
               minutes)


EXPERIMENTS = {"dothill": dothill, "dothill-nowc": dothill_nowc, "flashsoft": flashsoft, "flashsoft-wb": flashsoft_wb,
               "directcache": directcache, "vsan": vsan}


class Context:
    def __init__(self, args):
        self.stratad, self.cli = args.stratad, args.cli
        self.phases = Phases(args.quick, args.repeat)
        self.long = args.long
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.workdir = "/var/tmp"
        self.rows = []  # (experiment, figure, published, Strata's): the closing table

    def save(self, name, data):
        (self.out / (name + ".json")).write_text(json.dumps(data, indent=1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT", help=", ".join(EXPERIMENTS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--long", action="store_true", help="the vSAN soak for 3 hours (else 10 minutes)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default=str(harness.ROOT / "build" / "seedbench"))
    p.add_argument("--stratad", default=str(harness.ROOT / "build" / "release" / "controller" / "stratad"))
    p.add_argument("--cli", default=str(harness.ROOT / "build" / "release" / "tools" / "strata"))
    args = p.parse_args()
    for tool in (args.stratad, args.cli):
        if not os.access(tool, os.X_OK):
            sys.exit(f"seedbench: {tool} is not built (cmake --build build/release)")
    unknown = [e for e in args.experiments if e not in EXPERIMENTS]
    if unknown:
        sys.exit(f"seedbench: no experiment {', '.join(unknown)} (there are: {', '.join(EXPERIMENTS)})")
    ctx = Context(args)
    for name in args.experiments or list(EXPERIMENTS):
        try:
            EXPERIMENTS[name](ctx)
        except BenchError as e:
            sys.exit(f"seedbench: {name}: {e}")
    report(f"\n{'experiment':<18}{'figure':<34}{'published':>10}{'Strata':>9}{'of it':>8}")
    for experiment, figure, published, ours in ctx.rows:
        report(f"{experiment:<18}{figure:<34}{published:>9.1f}x{ours:>8.1f}x{ours / published:>8.0%}")
    ctx.save("summary", {"rows": ctx.rows})
    (ctx.out / "report.md").write_text("```\n" + "\n".join(REPORT).strip() + "\n```\n")
    say(f"results and plots in {ctx.out}")


if __name__ == "__main__":
    main()
