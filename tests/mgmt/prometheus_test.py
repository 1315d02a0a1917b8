#!/usr/bin/env python3
"""A real Prometheus (Debian's) scrapes stratad's /metrics while a real
initiator (qemu-io over iSCSI) writes, and a rate is queried through
Prometheus's HTTP API: the scrape is healthy (up == 1, no parse error),
the write rate is positive while the writes go on, and the latency
histogram answers histogram_quantile.
   prometheus_test.py PATH/TO/stratad"""
import atexit, json, os, shutil, subprocess, sys, tempfile, time, urllib.parse, urllib.request
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, failed, finish, free_port, start_stratad

stratad = sys.argv[1]
for tool in ("prometheus", "qemu-io"):
    if not shutil.which(tool):
        print("SKIP: %s is missing (tools/install-deps.sh installs it)" % tool)
        sys.exit(77)
state = tempfile.mkdtemp(prefix="strata-prometheus-")
atexit.register(shutil.rmtree, state, True)
daemon, ports = start_stratad(stratad, os.path.join(state, "array"))
iscsi, web, prom = ports["iscsi"], ports["http"], free_port()

with open(os.path.join(state, "prometheus.yml"), "w") as f:
    f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: strata\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % web)
server = subprocess.Popen(["prometheus", "--config.file", os.path.join(state, "prometheus.yml"), "--storage.tsdb.path",
                           os.path.join(state, "tsdb"), "--web.listen-address", "127.0.0.1:%d" % prom],
                          stdout=subprocess.DEVNULL, stderr=open(os.path.join(state, "prometheus.log"), "w"))
atexit.register(server.kill)


def query(expression):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (prom, urllib.parse.urlencode({"query": expression}))
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.load(r)
    except OSError:
        return None
    result = answer.get("data", {}).get("result", [])
    return float(result[0]["value"][1]) if result else None


for _ in range(60):
    if query("up{job='strata'}") == 1:
        break
    time.sleep(1)
check("Prometheus scrapes stratad: up == 1", query("up{job='strata'}") == 1)

# Writes for 20 s, 4 KiB at random offsets, flushing now and then.
lun = "iscsi://127.0.0.1:%d/iqn.2026-11.io.strata:array/0" % iscsi
writer = subprocess.Popen(["sh", "-c", "end=$(($(date +%%s)+20)); while [ $(date +%%s) -lt $end ]; do "
                           "qemu-io -f raw -c 'aio_write -P 9 0 4k' -c 'aio_write -P 9 1M 4k' -c 'aio_flush' -c 'write -P 9 8M 64k' -c 'flush' '%s' >/dev/null 2>&1; done" % lun])
time.sleep(15)
rate = query('rate(strata_volume_writes_total{volume="pools/p1/volumes/v1"}[10s])')
check("rate(strata_volume_writes_total[10s]) through Prometheus's API while writes go on: %s/s" % rate, rate is not None and rate > 0)
p99 = query('histogram_quantile(0.99, rate(strata_volume_write_latency_seconds_bucket{volume="pools/p1/volumes/v1"}[10s]))')
check("histogram_quantile(0.99) of the write latency: %s s" % p99, p99 is not None and 0 < p99 <= 10)
flushes = query('increase(strata_volume_flushes_total{volume="pools/p1/volumes/v1"}[10s])')
check("flushes are counted: %s in 10 s" % flushes, flushes is not None and flushes > 0)
samples = query("scrape_samples_scraped{job='strata'}")
check("every scrape is whole: %s samples, no scrape error" % samples, samples is not None and samples > 100)
writer.wait()
check("the group's state through a query: g1 optimal", query('strata_group_state{group="groups/g1",state="optimal"}') == 1)
server.terminate()
daemon.terminate()
daemon.wait(30)
finish("prometheus_test")
