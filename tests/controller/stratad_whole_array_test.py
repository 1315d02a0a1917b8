#!/usr/bin/env python3
"""Either controller's API answers for the whole array (README.md, "Two
controllers"): a pool's own work -- its volumes made, grown, moved between
tiers and deleted, its write cache, its statistics and heat, its disks'
and groups' state, their scrubs -- is done by the controller that serves
the pool, whichever API was asked; operations of both controllers are
listed, shown and cancelled through either. With the two controllers'
small default, pool p1 is a's and p2 b's.
   stratad_whole_array_test.py PATH/TO/stratad PATH/TO/strata"""
import json, os, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
from iscsi_raw import check, failures
from two_controllers import Pair

stratad, cli = sys.argv[1], sys.argv[2]
pair = Pair(stratad, cli)
strata, events_say = pair.strata, pair.events_say

def js(name, *words):
    """The CLI's --json output through `name`'s API, parsed; None on failure."""
    r = subprocess.run([cli, "--api", pair.api[name], "--json", *words], capture_output=True, text=True)
    if r.returncode != 0:
        print("strata --json %s: %s" % (" ".join(words), r.stderr.strip()))
        return None
    return json.loads(r.stdout) if r.stdout.strip() else {}

pair.start("a")
pair.start("b")
check("a hands pool p2 over to b, its home", events_say("a", "handed over to controller b, its home, in", 30))

check("each API says which controller answers", "controller A" in (strata("a", "version") or "") and "controller B" in (strata("b", "version") or ""))

# Volumes of b's pool, made through either API.
check("a volume of p2 (b's) is made through a's API", strata("a", "volume", "create", "w1", "--size", "1G", "--pool", "p2") is not None)
check("... and through b's", strata("b", "volume", "create", "w2", "--size", "1G", "--pool", "p2") is not None)
check("a volume of p1 (a's) is made through b's API", strata("b", "volume", "create", "w3", "--size", "1G", "--pool", "p1") is not None)
for name in ("a", "b"):
    listed = strata(name, "volume", "list", "p2") or ""
    check("%s lists w1 and w2 in p2" % name, "pools/p2/volumes/w1" in listed and "pools/p2/volumes/w2" in listed)
check("b's event log says it made w1 (it serves p2)", events_say("b", "pools/p2/volumes/w1", 5))
check("p2's volume grows through a", strata("a", "volume", "update", "pools/p2/volumes/w1", "--size", "2G") is not None)
show = js("b", "volume", "show", "pools/p2/volumes/w1") or {}
check("... and b's record says 2 GiB", int(show.get("size_bytes", 0)) == 2 << 30)
check("p2's write cache is set through a", strata("a", "pool", "update", "p2", "--write-cache", "write-through") is not None)
check("... and b's record says it", (js("b", "pool", "show", "p2") or {}).get("write_cache") == "WRITE_THROUGH")
check("... and back", strata("a", "pool", "update", "p2", "--write-cache", "write-back") is not None)

# Statistics and heat of b's pool and volume, through a.
stats = js("a", "pool", "stats", "p2")
check("p2's statistics through a (measured on b)", stats is not None and int(stats.get("capacity_bytes", 0)) > 0)
check("w1's statistics through a", js("a", "volume", "stats", "pools/p2/volumes/w1") is not None)
check("v1's statistics through b (a's pool)", js("b", "volume", "stats", "pools/p1/volumes/v1") is not None)
heat = js("a", "heat", "list", "pools/p2/volumes/w1", "--limit", "5")
check("w1's heat through a", isinstance(heat, list) and len(heat) > 0)

# Disks and groups: what the serving controller sees.
groups = {g["name"]: g for g in js("a", "group", "list") or []}
check("a shows b's group g2 OPTIMAL (as b sees it)", groups.get("groups/g2", {}).get("state") == "GROUP_OPTIMAL")
disks = js("a", "disk", "list") or []
g2 = [d for d in disks if d.get("group") == "groups/g2"]
check("a shows g2's members as ONLINE members of g2", len(g2) >= 4 and all(d.get("state") == "DISK_ONLINE" for d in g2))

# Operations: a volume move on p2 through a is b's operation, shown and
# cancelled through either.
op = js("a", "volume", "move", "pools/p2/volumes/w2", "--to", "performance")
name = (op or {}).get("name", "")
check("moving w2 through a starts an operation of b's (%s)" % name, name.startswith("operations/op-b-"))
check("... shown through a", (js("a", "op", "show", name) or {}).get("name") == name)
check("... shown through b", (js("b", "op", "show", name) or {}).get("name") == name)
listed = [o["name"] for o in js("a", "op", "list") or []]
check("a's op list has b's operation", name in listed)
# (An empty volume's move ends at once: b's refusal says so.)
r = subprocess.run([cli, "--api", pair.api["a"], "op", "cancel", name], capture_output=True, text=True)
check("... cancelled through a, by b", r.returncode == 0 or name + " has ended" in r.stderr)
op = js("b", "volume", "move", "pools/p1/volumes/w3", "--to", "performance")
name = (op or {}).get("name", "")
check("moving w3 (p1) through b starts an operation of a's (%s)" % name, name.startswith("operations/op-") and not name.startswith("operations/op-b-"))
check("... shown through b", (js("b", "op", "show", name) or {}).get("name") == name)
listed = [o["name"] for o in js("b", "op", "list") or []]
check("b's op list has a's operation and b's", name in listed and any(n.startswith("operations/op-b-") for n in listed))

# Deleting, through a, a volume of b's pool.
check("w1 is deleted through a", strata("a", "volume", "delete", "pools/p2/volumes/w1", "--wait") is not None)
for name in ("a", "b"):
    check("... and %s lists it no more" % name, "pools/p2/volumes/w1" not in (strata(name, "volume", "list", "p2") or "x"))
check("no change went uncopied", not events_say("a", "was not copied", 0) and not events_say("b", "was not copied", 0))

# A planned failover of a (its maintenance), through b's API: a's pools go
# to b and stay there, with no automatic failback, until failback.
op = js("b", "controller", "failover", "a", "--wait")
check("strata controller failover a --wait (through b): SUCCEEDED", (op or {}).get("state") == "SUCCEEDED")
def controllers(name):
    return {c["name"]: c for c in js(name, "controller", "list") or []}
ctl = controllers("a")
check("a says it is FAILED_OVER", ctl.get("controllers/a", {}).get("state") == "CONTROLLER_FAILED_OVER")
check("b owns p1 and p2", {"pools/p1", "pools/p2"} <= set(ctl.get("controllers/b", {}).get("pools", [])))
check("b describes itself to a: version, portal, ACTIVE", ctl.get("controllers/b", {}).get("version") and
      ctl.get("controllers/b", {}).get("iscsi_portal") and ctl.get("controllers/b", {}).get("state") == "CONTROLLER_ACTIVE")
check("b's list says the same of a", controllers("b").get("controllers/a", {}).get("state") == "CONTROLLER_FAILED_OVER")
time.sleep(3)
check("p1 stays on b (no automatic failback while a is failed over)", "pools/p1" in controllers("a").get("controllers/b", {}).get("pools", []))
check("a volume of p1 is made through a while b serves p1", strata("a", "volume", "create", "w5", "--size", "1G", "--pool", "p1") is not None)
r = subprocess.run([cli, "--api", pair.api["a"], "pool", "move", "p1", "--to", "a"], capture_output=True, text=True)
check("a move to the failed-over a is refused, saying why", r.returncode != 0 and "failed over" in r.stderr)
op = js("a", "controller", "failback", "a", "--wait")
check("strata controller failback a --wait: SUCCEEDED", (op or {}).get("state") == "SUCCEEDED" and op.get("progress_fraction") == 1)
ctl = controllers("b")
check("a is ACTIVE and owns p1 again; b owns p2", ctl.get("controllers/a", {}).get("state") == "CONTROLLER_ACTIVE" and
      ctl.get("controllers/a", {}).get("pools") == ["pools/p1"] and ctl.get("controllers/b", {}).get("pools") == ["pools/p2"])
op = js("a", "pool", "move", "p2", "--to", "a", "--wait")
check("strata pool move p2 --to a --wait: SUCCEEDED (a planned move: p2's home is a now)", (op or {}).get("state") == "SUCCEEDED")
op = js("b", "pool", "move", "p2", "--to", "b", "--wait")
check("... and back through b", (op or {}).get("state") == "SUCCEEDED")
check("the moves were operations listed through either", {"pool.move", "controller.failover", "controller.failback"} <=
      {o["kind"] for o in js("b", "op", "list") or []})

# a killed and started again at once, while b may be taking its pool
# over: a holds back the pool its drives name it the owner of until b has
# heard it beat, then one of the two serves it, never both.
pair.kill("a")
pair.start("a")
err = open(os.path.join(pair.state, "a.err")).read()
check("a, restarted while b beats, holds p1 back until b has heard it", "waits: controller b is alive" in err or "served by controller b" in err)
def owners_of_p1():
    own = []
    for name in ("a", "b"):
        me = controllers(name).get("controllers/" + name, {})
        if "pools/p1" in me.get("pools", []):
            own.append(name)
    return own
settled, seen = [], set()
for _ in range(300):
    settled = owners_of_p1()
    seen.add(tuple(settled))
    # p1's home is a: whoever held it, it ends on a (b hands it back).
    if settled == ["a"] and all(controllers(n).get("controllers/" + n, {}).get("state") == "CONTROLLER_ACTIVE" for n in ("a", "b")):
        break
    time.sleep(0.1)
# (Each list is that controller's own record, which a hand-over updates
# on the two sides a moment apart: seen for the log, not asserted.)
check("... then p1 is served by one controller, a, its home (owners seen: %s)" % sorted(seen), settled == ["a"])
check("... and a volume of p1 is made", strata("b", "volume", "create", "w6", "--size", "1G", "--pool", "p1") is not None)

# With b dead and p2 taken over by a, a does p2's work itself.
pair.kill("b")
def a_alone_with_p2():
    ctl = controllers("a")
    return ctl.get("controllers/b", {}).get("state") == "CONTROLLER_DOWN" and "pools/p2" in ctl.get("controllers/a", {}).get("pools", [])
took = False
for _ in range(200):
    took = a_alone_with_p2()
    if took:
        break
    time.sleep(0.1)
check("a sees b DOWN and takes p2 over", took and events_say("a", "taken over from controller b", 5))
check("a volume of p2 is made through a, which serves it now", strata("a", "volume", "create", "w4", "--size", "1G", "--pool", "p2") is not None)
check("p2's statistics through a", js("a", "pool", "stats", "p2") is not None)
sys.exit(1 if failures else 0)
