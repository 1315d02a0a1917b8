"""The suite's plots (PNG, matplotlib from Debian's python3-matplotlib)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _finish(fig, path, title):
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def ratio_bars(path, title, rows):
    """rows: (configuration, published IOPS ratio, Strata's, published
    latency ratio, Strata's), each over the same run's all-HDD baseline."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, (what, pub, ours) in zip(axes, (("IOPS over all-HDD", 1, 2), ("latency reduction over all-HDD", 3, 4))):
        names = [r[0] for r in rows]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[pub] for r in rows], 0.4, label="published", color="#999999")
        ax.bar([i + 0.2 for i in x], [r[ours] for r in rows], 0.4, label="Strata", color="#2b6cb0")
        for i, r in enumerate(rows):
            ax.text(i - 0.2, r[pub], f"{r[pub]:.1f}x", ha="center", va="bottom", fontsize=8)
            ax.text(i + 0.2, r[ours], f"{r[ours]:.1f}x", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(x), names)
        ax.set_title(what, fontsize=10)
        ax.axhline(1, color="black", linewidth=0.5)
    axes[0].legend(fontsize=8)
    _finish(fig, path, title)


def speedup(path, title, published_range, ratio):
    """One ratio over all-HDD against the published range (low, high)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    low, high = published_range
    ax.bar([0], [high - low], 0.5, bottom=[low], color="#999999")
    ax.bar([1], [ratio], 0.5, color="#2b6cb0")
    ax.text(0, high, f"{low:.2f}-{high:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.text(1, ratio, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_xticks([0, 1], ["published", "Strata"])
    ax.set_ylabel("TPS over all-HDD")
    ax.set_ylim(0, max(high, ratio) * 1.2)
    ax.axhline(1, color="black", linewidth=0.5)
    _finish(fig, path, title)


def warmup(path, title, curves, baseline_iops=None):
    """curves: {name: {"iops": [(second, IOPS)], "stats": [(second, hit
    fraction, SSD-tier fraction)]}}: IOPS above, the cache's hits and the
    tier's share below, over the warm-up."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    for name, c in curves.items():
        if c.get("iops"):
            top.plot([t for t, _ in c["iops"]], [v for _, v in c["iops"]], label=name, linewidth=1)
        stats = c.get("stats") or []
        if any(h for _, h, _ in stats):
            bottom.plot([t for t, _, _ in stats], [h * 100 for _, h, _ in stats], label=name + ": cache hits")
        if any(f for _, _, f in stats):
            bottom.plot([t for t, _, _ in stats], [f * 100 for _, _, f in stats], "--",
                        label=name + ": reads from the SSD tier")
    if baseline_iops:
        top.axhline(baseline_iops, color="black", linewidth=0.8, linestyle=":", label="without the cache")
    top.set_ylabel("IOPS")
    top.legend(fontsize=8)
    bottom.set_ylabel("%")
    bottom.set_xlabel("seconds from a cold start")
    bottom.set_ylim(0, 100)
    bottom.legend(fontsize=8)
    _finish(fig, path, title)


def density(path, title, variants):
    """variants: {name: ([(workloads, IOPS, mean latency ms)] with the
    cache, the baseline's latency)}: latency against workloads, and the
    baseline's latency as the line to stay under."""
    fig, ax = plt.subplots(figsize=(7.5, 4))
    for i, (name, (steps, baseline_ms)) in enumerate(variants.items()):
        color = ("#2b6cb0", "#c05621", "#2f855a")[i % 3]
        ax.plot([n for n, _, _ in steps], [ms for _, _, ms in steps], "o-", color=color, label=name + ": with the cache")
        ax.axhline(baseline_ms, color=color, linestyle=":", label=name + ": one workload, no cache")
    ax.set_xlabel("concurrent workloads (4 KiB, 70% reads, 8 in flight each)")
    ax.set_ylabel("mean latency (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    _finish(fig, path, title)


def scaling(path, title, steps):
    """steps: (workloads, IOPS, mean latency ms)."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot([n for n, _, _ in steps], [i for _, i, _ in steps], "o-", label="IOPS")
    ax.set_xlabel("concurrent workloads")
    ax.set_ylabel("IOPS")
    twin = ax.twinx()
    twin.plot([n for n, _, _ in steps], [ms for _, _, ms in steps], "s--", color="#c05621", label="mean latency")
    twin.set_ylabel("mean latency (ms)")
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="lower right", fontsize=8)
    _finish(fig, path, title)


def soak(path, title, minutes):
    """minutes: {0: [(minute, read ms)], 1: [(minute, write ms)]}."""
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for direction, name in ((0, "reads"), (1, "writes")):
        points = minutes.get(direction, [])[:-1]
        if points:
            ax.plot([m for m, _ in points], [ms for _, ms in points], ".-", label=name)
    ax.set_xlabel("minute")
    ax.set_ylabel("mean latency (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    _finish(fig, path, title)
