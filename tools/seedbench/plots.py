"""The suite's plots (PNG, matplotlib from Debian's python3-matplotlib)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


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
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
            bottom.plot([t for t, _, _ in stats], [f * 100 for _, _, f in stats], "--", label=name + ": reads from the SSD tier")
    if baseline_iops:
        top.axhline(baseline_iops, color="black", linewidth=0.8, linestyle=":", label="without the cache")
    top.set_ylabel("IOPS")
    top.legend(fontsize=8)
    bottom.set_ylabel("%")
    bottom.set_xlabel("seconds from a cold start")
    bottom.set_ylim(0, 100)
    bottom.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def density(path, title, steps, baseline_ms):
    """steps: (workloads, IOPS, mean latency ms) with the cache; the
    baseline's latency as the line to stay under."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot([n for n, _, _ in steps], [ms for _, _, ms in steps], "o-", label="latency with the cache")
    ax.axhline(baseline_ms, color="black", linestyle=":", label="one workload on the HDDs alone")
    ax.set_xlabel("concurrent workloads (4 KiB, 70% reads, 8 in flight each)")
    ax.set_ylabel("mean latency (ms)")
    twin = ax.twinx()
    twin.plot([n for n, _, _ in steps], [i for _, i, _ in steps], "s--", color="#888888", label="IOPS")
    twin.set_ylabel("IOPS")
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
