#!/usr/bin/env python3
"""Hot spares are global (README.md, "Disks, spares, rebuilds and
scrubs"), and with two controllers each serves its own pools' groups from
the same spares: a spare one controller puts in place of a failed member
must never be taken by the other. Before a spare takes a member's place,
its controller claims it from the partner (link type 26, spare_claim).
With the two controllers' small default, pool p1 (g1: hdd-00..04) is a's
and p2 (g2: hdd-05..09) b's; a disk added and made a spare through a's API
is a spare on b too.
   stratad_shared_spares_test.py PATH/TO/stratad PATH/TO/strata"""
import os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target"))
from iscsi_raw import check, failures
from two_controllers import Pair

stratad, cli = sys.argv[1], sys.argv[2]
pair = Pair(stratad, cli)
strata, events_say = pair.strata, pair.events_say

def events(name):
    return strata(name, "events", "--limit", "1000") or ""

def rebuilds_onto(disk):
    """The rebuilds onto `disk` each controller's event log names."""
    return {name: [l for l in events(name).splitlines() if "onto disks/%s" % disk in l and "rebuilding" in l] for name in ("a", "b")}

pair.start("a")
pair.start("b")
check("a hands pool p2 over to b, its home", events_say("a", "handed over to controller b, its home, in", 30))
check("LUN 0 (p1, a's) takes a pattern", pair.qemu_io("a", 0, "write -P 0x5a 0 8M", "flush"))
check("LUN 1 (p2, b's) takes a pattern", pair.qemu_io("b", 1, "write -P 0xa5 0 8M", "flush"))

# One spare, added through a's API: a spare on both controllers.
check("a disk is added through a", strata("a", "disk", "add", "spare-00", "--kind", "hdd", "--size", "4GiB") is not None)
check("... and made a hot spare", strata("a", "disk", "spare", "spare-00") is not None)
check("b opens it from the shared shelf and makes it a spare too", events_say("b", "disks/spare-00", 10))

# a's group loses a member: a claims the spare (b drops it) and rebuilds.
check("hdd-01 (g1, a's) fails", strata("a", "disk", "fail", "hdd-01") is not None)
check("a rebuilds g1 onto the spare", events_say("a", "onto disks/spare-00", 10))
check("b dropped the spare: a took it", events_say("b", "no longer a hot spare here: the partner controller took it", 10))

# Then b's group loses a member: the spare is a's now, and b has none.
check("hdd-06 (g2, b's) fails", strata("b", "disk", "fail", "hdd-06") is not None)
time.sleep(3)
onto = rebuilds_onto("spare-00")
check("only a rebuilt onto spare-00 (a: %d, b: %d)" % (len(onto["a"]), len(onto["b"])), len(onto["a"]) == 1 and not onto["b"])

# A second spare, added through b's API while g2 waits for one: b claims it.
check("another disk is added through b", strata("b", "disk", "add", "spare-01", "--kind", "hdd", "--size", "4GiB") is not None)
check("... and made a hot spare", strata("b", "disk", "spare", "spare-01") is not None)
check("b rebuilds g2 onto it", events_say("b", "onto disks/spare-01", 15))
check("hdd-02 (g1, a's) fails: a finds no spare left", strata("a", "disk", "fail", "hdd-02") is not None)
time.sleep(3)
onto = rebuilds_onto("spare-01")
check("only b rebuilt onto spare-01 (a: %d, b: %d)" % (len(onto["a"]), len(onto["b"])), len(onto["b"]) == 1 and not onto["a"])

# Both rebuilds end, and each LUN reads back its pattern.
def rebuilt(name, disk):
    return events_say(name, "disks/%s is rebuilt: a full member" % disk, 120)
check("a's rebuild onto spare-00 ends", rebuilt("a", "spare-00"))
check("b's rebuild onto spare-01 ends", rebuilt("b", "spare-01"))
check("LUN 0 reads its pattern", pair.qemu_io("a", 0, "read -P 0x5a 0 8M"))
check("LUN 1 reads its pattern", pair.qemu_io("b", 1, "read -P 0xa5 0 8M"))
sys.exit(1 if failures else 0)
