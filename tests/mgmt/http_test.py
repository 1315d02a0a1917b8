#!/usr/bin/env python3
"""stratad's HTTP side (mgmt/http_server.h) from outside, over real
sockets: the API as Connect JSON agrees with the gRPC API (the same codes
and messages, the same resources), every method of strata.v1.Array is
there, bad input gets its HTTP and API error while other clients go on,
/metrics counts what a real initiator did, and off loopback it takes TLS
and the token (bearer or a login cookie).
   http_test.py PATH/TO/stratad PATH/TO/strata"""
import atexit, base64, http.client, json, os, random, re, shutil, socket, ssl, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import check, failed, finish, free_port, start_stratad

stratad, cli = sys.argv[1], sys.argv[2]
seed = int(os.environ.get("SEED", random.randrange(1 << 30)))
random.seed(seed)
print("seed %d (SEED=%d to repeat)" % (seed, seed))


def start(state, *extra):
    p, ports = start_stratad(stratad, state, "--heat-history-interval-s", "10", *extra)
    return p, ports["iscsi"], ports["grpc"], ports["http"]


def stop(p):
    p.terminate()
    p.wait(30)


def call(port, method, body, headers=None, tls=None, raw=None):
    """POST /strata.v1.Array/METHOD: (HTTP status, JSON answer, headers)."""
    c = http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=30) if tls else \
        http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", "/strata.v1.Array/" + method, raw if raw is not None else json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data), r
    except ValueError:
        return r.status, data, r


def strata(grpc, *words):
    return subprocess.run([cli, "--api", "127.0.0.1:%d" % grpc, *words], capture_output=True, text=True)


state = tempfile.mkdtemp(prefix="strata-http-")
atexit.register(shutil.rmtree, state, True)
daemon, iscsi, grpc, web = start(os.path.join(state, "plain"))

# --- The JSON API: derived from the service, so every method is there ---
proto = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "proto", "strata", "v1", "array.proto")).read()
methods = re.findall(r"^\s*rpc (\w+)\(", proto, re.M)
missing = [m for m in methods if call(web, m, {"name": "nothing/x"})[0] in (404, 405, 415)
           and call(web, m, {"name": "nothing/x"})[1].get("code") == "unimplemented"]
check("all %d methods of strata.v1.Array answer as JSON (none unknown): %s" % (len(methods), missing or "ok"), len(methods) > 40 and not missing)

status, answer, _ = call(web, "ListVolumes", {"parent": "pools/p1"})
check("ListVolumes: 200 and v1 in it, with every field (zero values too)",
      status == 200 and [v["name"] for v in answer["volumes"]] == ["pools/p1/volumes/v1"] and "writeCache" in answer["volumes"][0])
status, answer, _ = call(web, "CreateVolume", {"parent": "pools/p1", "volumeId": "web1", "volume": {"sizeBytes": str(256 << 20)}})
check("CreateVolume through JSON: 200, the volume back", status == 200 and answer.get("name") == "pools/p1/volumes/web1")
listed = strata(grpc, "volume", "list")
check("... and `strata volume list` (gRPC) shows it", "web1" in listed.stdout)
status, answer, _ = call(web, "ListVolumes", {"parent": "pools/-"})
check("ListVolumes of pools/- (every pool's): 200, each volume named with its pool",
      status == 200 and [v["name"] for v in answer.get("volumes", [])] == ["pools/p1/volumes/v1", "pools/p1/volumes/web1"])

status, answer, _ = call(web, "CreateVolume", {"parent": "pools/p1", "volumeId": "bad", "volume": {"sizeBytes": "1000"}})
grpc_said = subprocess.run(["grpcurl", "-plaintext", "-d", '{"parent":"pools/p1","volume_id":"bad","volume":{"size_bytes":1000}}',
                            "127.0.0.1:%d" % grpc, "strata.v1.Array/CreateVolume"], capture_output=True, text=True) \
    if shutil.which("grpcurl") else None
detail = (answer.get("details") or [{}])[0] if isinstance(answer, dict) else {}
check("an invalid size: 400 invalid_argument, the field in the details (%s)" % answer.get("message"),
      status == 400 and answer.get("code") == "invalid_argument" and detail.get("debug", {}).get("field") == "volume.size_bytes")
check("... and the detail's value is the ErrorInfo, base64 without padding",
      detail.get("type") == "strata.v1.ErrorInfo" and b"volume.size_bytes" in base64.b64decode(detail["value"] + "=" * (-len(detail["value"]) % 4)))
if grpc_said is not None:
    check("... the gRPC API says the same code and words",
          "InvalidArgument" in grpc_said.stderr and answer["message"] in grpc_said.stderr)
status, answer, _ = call(web, "GetVolume", {"name": "pools/p1/volumes/nope"})
check("a missing volume: 404 not_found", status == 404 and answer.get("code") == "not_found")
status, answer, _ = call(web, "CreateVolume", {"parent": "pools/p1", "volumeId": "web1", "volume": {"sizeBytes": str(256 << 20)}})
check("the same volume again: 409 already_exists", status == 409 and answer.get("code") == "already_exists")

# --- Bad input ---
status, answer, _ = call(web, "ListVolumes", None, raw="{not json")
check("malformed JSON: 400 invalid_argument naming the message type", status == 400 and "strata.v1.ListRequest" in answer["message"])
status, answer, _ = call(web, "ListVolumes", {"parent": "pools/p1", "colour": "red"})
check("an unknown field: 400, naming it", status == 400 and "colour" in answer["message"])
status, answer, _ = call(web, "ListVolumes", {"pageSize": "many"})
check("a field of the wrong type: 400", status == 400 and answer["code"] == "invalid_argument")
status, answer, _ = call(web, "Explode", {})
check("an unknown method: 404 unimplemented", status == 404 and answer["code"] == "unimplemented")
status, answer, _ = call(web, "ListVolumes", {}, headers={"Content-Type": "text/plain"})
check("a body that is not JSON by its type: 415", status == 415)
c = http.client.HTTPConnection("127.0.0.1", web, timeout=10)
c.request("GET", "/strata.v1.Array/ListVolumes")
r = c.getresponse()
r.read()
check("GET on a method: 405, Allow: POST", r.status == 405 and r.getheader("Allow") == "POST")
status, answer, _ = call(web, "ListVolumes", None, raw="{" + " " * (2 << 20) + "}")
check("a 2 MiB body: 413", status == 413)

# A slow client (half a request line, then nothing), a client sending
# garbage, and 32 clients at once: the others are answered meanwhile.
slow = socket.create_connection(("127.0.0.1", web))
slow.sendall(b"POST /strata.v1.Array/ListVolumes HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
junk = socket.create_connection(("127.0.0.1", web))
junk.sendall(bytes(random.randrange(256) for _ in range(4096)))
results, latencies = [], []


def client():
    t = time.monotonic()
    results.append(call(web, "ListDisks", {})[0])
    latencies.append(time.monotonic() - t)


threads = [threading.Thread(target=client) for _ in range(32)]
for t in threads:
    t.start()
for t in threads:
    t.join()
latencies.sort()
check("32 clients at once beside a stalled one and a garbage one: all 200 (median %.1f ms, max %.1f ms)"
      % (1000 * latencies[len(latencies) // 2], 1000 * latencies[-1]), results == [200] * 32)
junk.settimeout(10)
try:
    got = junk.recv(100)
except OSError:
    got = b""
check("the garbage client gets an error or a close, not a hang", got == b"" or got.startswith(b"HTTP/1.1 4"))

# --- /metrics, after a real initiator's I/O ---
if shutil.which("qemu-io"):
    subprocess.run(["qemu-io", "-f", "raw", "-c", "write -P 7 0 8M", "-c", "read -P 7 0 8M", "-c", "flush",
                    "iscsi://127.0.0.1:%d/iqn.2026-11.io.strata:array/0" % iscsi], capture_output=True, check=False)
c = http.client.HTTPConnection("127.0.0.1", web, timeout=30)
c.request("GET", "/metrics")
r = c.getresponse()
text = r.read().decode()
check("/metrics: 200, the exposition format's content type", r.status == 200 and "version=0.0.4" in r.getheader("Content-Type"))


def value(series):
    m = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


v1 = '{volume="pools/p1/volumes/v1"}'
check("... the volume's writes, reads and flushes are counted (%s, %s, %s)" % (value("strata_volume_writes_total" + v1),
      value("strata_volume_reads_total" + v1), value("strata_volume_flushes_total" + v1)),
      (value("strata_volume_writes_total" + v1) or 0) >= 1 and (value("strata_volume_reads_total" + v1) or 0) >= 1
      and (value("strata_volume_flushes_total" + v1) or 0) >= 1)
check("... its write latency histogram's +Inf bucket equals its count",
      value('strata_volume_write_latency_seconds_bucket{volume="pools/p1/volumes/v1",le="+Inf"}') ==
      value("strata_volume_write_latency_seconds_count" + v1) == value("strata_volume_writes_total" + v1))
tier_reads = sum(float(n) for n in re.findall(
    r'^strata_volume_tier_read_latency_seconds_count\{volume="pools/p1/volumes/v1",tier="[a-z]+"\} (\S+)$', text, re.M))
check("... its reads per tier (%s) add up to its read pieces (%s)" % (tier_reads, value("strata_volume_read_pieces_total" + v1)),
      tier_reads >= 1 and tier_reads == value("strata_volume_read_pieces_total" + v1))
check("... disks, groups, pools, the controller and its port are there",
      all(s in text for s in ('strata_disk_state{disk="disks/hdd-00",state="online"} 1', 'strata_group_state{group="groups/g1",state="optimal"} 1',
                              'strata_pool_size_bytes{pool="pools/p1",tier="performance"}', 'strata_controller_state{controller="controllers/a",state="active"} 1',
                              'strata_port_connections{controller="controllers/a",protocol="iscsi"')))
names = set(re.findall(r"^# TYPE (\S+) (\S+)", text, re.M))
check("... every counter ends in _total, every name is strata_…",
      all(n.startswith("strata_") and (t != "counter" or n.endswith("_total")) for n, t in names))

# The heat history through JSON.
status, answer, _ = call(web, "ListHeatHistory", {"parent": "pools/p1/volumes/nope"})
check("ListHeatHistory of a missing volume: 404", status == 404)
status, answer, _ = call(web, "ListHeatHistory", {"parent": "volumes/v1"})
check("ListHeatHistory of a malformed name: 400 naming parent", status == 400 and answer["message"].startswith("parent:"))

stop(daemon)
check("a clean stop with the stalled client still connected", daemon.returncode == 0)
slow.close()
junk.close()

# --- Off loopback: refused without TLS ---
bad = subprocess.run([stratad, "--state-dir", os.path.join(state, "open"), "--small-shelf", "--nvme", "off",
                      "--iscsi", "127.0.0.1:%d" % free_port(), "--grpc", "127.0.0.1:%d" % free_port(), "--http", "0.0.0.0:%d" % free_port()],
                     capture_output=True, text=True, timeout=120)
check("--http off loopback with no TLS: refused, saying why",
      bad.returncode == 1 and "off loopback, so it needs TLS and a bearer token" in bad.stderr)

# --- TLS and the token ---
keys = os.path.join(state, "keys")
os.mkdir(keys)
cert, key, token_file = (os.path.join(keys, n) for n in ("cert.pem", "key.pem", "token"))
subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
                "-subj", "/CN=strata-test", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
               check=True, capture_output=True)
token = "%064x" % random.getrandbits(256)
with open(token_file, "w") as f:
    f.write(token + "\n")
daemon, iscsi, grpc, web = start(os.path.join(state, "tls"), "--grpc-tls-cert", cert, "--grpc-tls-key", key, "--grpc-token-file", token_file)
tls = ssl.create_default_context(cafile=cert)
try:
    call(web, "ListDisks", {})
    plaintext_refused = False
except (OSError, http.client.HTTPException):
    plaintext_refused = True
check("with TLS: a plaintext client gets no answer", plaintext_refused)
status, answer, _ = call(web, "ListDisks", {}, tls=tls)
check("HTTPS without a token: 401 unauthenticated", status == 401 and answer["code"] == "unauthenticated")
status, answer, _ = call(web, "ListDisks", {}, tls=tls, headers={"Authorization": "Bearer " + "0" * 64})
check("a wrong token: 401, saying so", status == 401 and "not the one" in answer["message"])
status, answer, _ = call(web, "ListDisks", {}, tls=tls, headers={"Authorization": "Bearer " + token})
check("the token: 200", status == 200 and len(answer["disks"]) == 15)
c = http.client.HTTPSConnection("127.0.0.1", web, context=tls, timeout=30)
c.request("GET", "/metrics")
r = c.getresponse()
r.read()
check("/metrics without the token: 401", r.status == 401)
c = http.client.HTTPSConnection("127.0.0.1", web, context=tls, timeout=30)
c.request("GET", "/")
r = c.getresponse()
page = r.read()
check("the console's page needs no token (it holds no data), with a CSP", r.status == 200 and b"<html" in page.lower()
      and "default-src 'self'" in (r.getheader("Content-Security-Policy") or ""))


def login(t):
    c = http.client.HTTPSConnection("127.0.0.1", web, context=tls, timeout=30)
    c.request("POST", "/login", json.dumps({"token": t}), {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    return r.status, r.getheader("Set-Cookie") or ""


status, cookie = login("x" * 64)
check("login with a wrong token: 401, no cookie", status == 401 and cookie == "")
status, cookie = login(token)
check("login with the token: a session cookie, HttpOnly, Secure, SameSite=Strict",
      status == 200 and all(a in cookie for a in ("strata_session=", "HttpOnly", "Secure", "SameSite=Strict")))
session = cookie.split(";")[0]
status, answer, _ = call(web, "ListPools", {}, tls=tls, headers={"Cookie": session})
check("the cookie lets API calls in", status == 200 and answer["pools"][0]["name"] == "pools/p1")
c = http.client.HTTPSConnection("127.0.0.1", web, context=tls, timeout=30)
c.request("POST", "/logout", "", {"Cookie": session})
c.getresponse().read()
status, answer, _ = call(web, "ListPools", {}, tls=tls, headers={"Cookie": session})
check("after logout the cookie is refused", status == 401)
stop(daemon)

finish("http_test (seed %d)" % seed)
