#!/usr/bin/env python3
"""The management API's latency, over its two faces in one run: the same
call (GetVolumeStatistics, then ListVolumes) made N times one at a time
over HTTP/JSON (a kept-alive connection) and over gRPC (ghz, one
connection, one call at a time), and /metrics scraped N/10 times. Prints
medians and 99th percentiles, and the ratio HTTP/gRPC.
   api_latency.py PATH/TO/stratad [--calls N]
It starts its own stratad (small shelf, free loopback ports) and removes
its state when done. ghz comes from tools/install-deps.sh --apibench; without it the
gRPC column is left out, saying so."""
import argparse, atexit, http.client, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("stratad")
parser.add_argument("--calls", type=int, default=2000)
args = parser.parse_args()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


state = tempfile.mkdtemp(prefix="strata-apibench-")
atexit.register(shutil.rmtree, state, True)
grpc, web = free_port(), free_port()
daemon = subprocess.Popen([args.stratad, "--state-dir", state, "--small-shelf", "--nvme", "off", "--iscsi", "127.0.0.1:%d" % free_port(),
                           "--grpc", "127.0.0.1:%d" % grpc, "--http", "127.0.0.1:%d" % web],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
atexit.register(daemon.kill)
for line in daemon.stdout:
    if "stratad is ready" in line:
        break


def percentiles(ms):
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def over_http(method, body, n, path=None):
    c = http.client.HTTPConnection("127.0.0.1", web)
    took = []
    for _ in range(n):
        t = time.perf_counter()
        if path:
            c.request("GET", path)
        else:
            c.request("POST", "/strata.v1.Array/" + method, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        took.append(1000 * (time.perf_counter() - t))
        if r.status != 200:
            sys.exit("%s: HTTP %d" % (method or path, r.status))
    return percentiles(took)


def over_grpc(method, body, n):
    if not shutil.which("ghz"):
        return None
    out = subprocess.run(["ghz", "--insecure", "--call", "strata.v1.Array/" + method, "-d", json.dumps(body), "-n", str(n), "-c", "1",
                          "--connections", "1", "-O", "json", "127.0.0.1:%d" % grpc], capture_output=True, text=True)
    report = json.loads(out.stdout)
    lat = {d["percentage"]: d["latency"] / 1e6 for d in report["latencyDistribution"]}
    return lat[50], lat[99]


print("%-22s %22s %22s %8s" % ("call", "HTTP/JSON median / p99", "gRPC median / p99", "ratio"))
for method, body in (("GetVolumeStatistics", {"name": "pools/p1/volumes/v1"}), ("ListVolumes", {"parent": "pools/p1"})):
    over_http(method, body, 100)  # warm
    h = over_http(method, body, args.calls)
    g = over_grpc(method, body, args.calls)
    print("%-22s %10.3f / %7.3f ms %10s %8s" % (method, h[0], h[1], "%.3f / %.3f ms" % g if g else "(no ghz)",
                                              "%.2f" % (h[0] / g[0]) if g else "-"))
m = over_http(None, None, max(10, args.calls // 10), path="/metrics")
print("%-22s %10.3f / %7.3f ms" % ("GET /metrics", m[0], m[1]))
daemon.terminate()
daemon.wait(30)
