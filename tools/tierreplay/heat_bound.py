#!/usr/bin/python3
"""How far could any heat-ranked tier go on a trace, if moves were free and
instant? (docs/tier-replay.md)

    tools/tierreplay/heat_bound.py TRACE.csv.gz [--tier 0.05,0.10]

The replayer (strata-tierreplay) runs the real migrator, whose moves take
drive time and queue behind the hosts' I/O. This asks the question without
any of that: extents 4 MiB, every I/O (sequential or not) counted, a heat
score decayed with half-life H, and every second the N hottest extents
placed on the tier at once, a newcomer displacing the coldest resident
when it is HYSTERESIS times hotter. It prints the share of I/Os the tier
served and the moves it took, beside the fixed oracle (the N extents with
the most I/Os over the whole trace) and the moves the replayer's budget
allows (the host's bytes in 4 MiB extents). Pure Python: a minute a run.
"""
import argparse
import collections
import gzip

EXTENT_BYTES = 4 << 20


def accesses(path):
    """(seconds, extent key) for each extent piece of each record, in time order."""
    records = []
    host_bytes = 0
    with gzip.open(path, "rt") as f:
        next(f)  # ts_us,vol,offset,size,op
        for line in f:
            ts, vol, offset, size, _ = line.rstrip().split(",")
            offset, size = int(offset), int(size)
            if size == 0:
                continue
            host_bytes += size
            for e in range(offset // EXTENT_BYTES, (offset + size - 1) // EXTENT_BYTES + 1):
                records.append((int(ts) / 1e6, (int(vol), e)))
    records.sort(key=lambda r: r[0])
    return records, host_bytes


def heat_tier(acc, n, half_life_s, hysteresis, interval_s=1.0):
    """Share of I/Os served by a tier of n extents ranked by decayed heat, and its moves."""
    score, stamp = {}, {}

    def heat(e, t):
        return score[e] * 2 ** (-(t - stamp[e]) / half_life_s) if e in score else 0.0

    tier, hits, moves, next_round = set(), 0, 0, 0.0
    for t, e in acc:
        if t >= next_round:
            next_round = t + interval_s
            outsiders = sorted(((heat(x, t), x) for x in score if x not in tier), reverse=True)[:n]
            residents = sorted((heat(x, t), x) for x in tier)
            coldest = 0
            for s, x in outsiders:
                if len(tier) < n:
                    tier.add(x)
                    moves += 1
                elif coldest < len(residents) and s > hysteresis * residents[coldest][0]:
                    tier.discard(residents[coldest][1])
                    tier.add(x)
                    moves += 2
                    coldest += 1
                else:
                    break
        hits += e in tier
        score[e] = heat(e, t) + 1
        stamp[e] = t
    return hits / len(acc), moves


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--tier", default="0.05,0.10")
    p.add_argument("--half-lives", default="60,300,1800,3600")
    p.add_argument("--hysteresis", default="1.5,3")
    args = p.parse_args()
    acc, host_bytes = accesses(args.trace)
    footprint = len({e for _, e in acc})
    counts = collections.Counter(e for _, e in acc)
    budget = host_bytes // EXTENT_BYTES
    print(f"{args.trace}: {len(acc)} extent I/Os, {footprint} extents; the replayer's budget: {budget} moves")
    for fraction in (float(x) for x in args.tier.split(",")):
        n = max(1, int(fraction * footprint))
        top = {e for e, _ in counts.most_common(n)}
        oracle = sum(e in top for _, e in acc) / len(acc)
        print(f"{fraction:.0%} tier ({n} extents): fixed oracle {oracle:.3f}")
        for h in (float(x) for x in args.half_lives.split(",")):
            for y in (float(x) for x in args.hysteresis.split(",")):
                share, moves = heat_tier(acc, n, h, y)
                print(f"  half-life {h:>6.0f} s, hysteresis {y:>3}: {share:.3f} ({share / oracle:.2f} of the oracle), "
                      f"{moves} moves ({moves / budget:.2f} of the budget)")


if __name__ == "__main__":
    main()
