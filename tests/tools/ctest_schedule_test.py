#!/usr/bin/env python3
"""How ctest schedules the suite (tests/README.md, "How ctest runs them"),
checked from ctest's own description of it (--show-only=json-v1), so that
a test added later cannot miss its lock:
- every test that boots a TCG guest (a guest_*_test.sh script) holds the
  lock "timing";
- every test that starts two controllers (its script names the second
  controller's address 127.0.0.2 or imports two_controllers.py; strata-torture
  --takeover) holds "two_controllers" and "timing";
- every test on the Ceph cluster fixture holds "ceph";
- the label "quick" (tools/test.sh --quick) holds the simulation's seeds
  and every Catch2 test case, and nothing that starts a daemon or a guest.
   ctest_schedule_test.py PATH/TO/ctest BUILD_DIR"""
import json, os, re, subprocess, sys

ctest, build_dir = sys.argv[1], sys.argv[2]
failures = 0

def check(what, ok, detail=""):
    global failures
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, "" if ok or not detail else "\n    " + str(detail)[:1500]))
    if not ok:
        failures += 1

r = subprocess.run([ctest, "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True, timeout=60)
check("ctest describes the suite", r.returncode == 0, r.stderr)
tests = json.loads(r.stdout)["tests"]

def prop(test, name, default=None):
    for p in test.get("properties", []):
        if p["name"] == name:
            return p["value"]
    return default

def script_of(test):
    """The test's script: the command itself, or what python3 runs."""
    command = test.get("command") or []
    words = command[1:] if command and os.path.basename(command[0]).startswith("python") else command
    return words[0] if words else ""

def script_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""

guests = [t for t in tests if re.fullmatch(r"guest_\w+_test\.sh", os.path.basename(script_of(t)))]
two = []
for t in tests:
    script = script_of(t)
    scripted = script.endswith((".sh", ".py")) and os.path.abspath(script) != os.path.abspath(__file__)
    text = script_text(script) if scripted else ""
    command = t.get("command") or []
    if "127.0.0.2" in text or re.search(r"^from two_controllers import", text, re.M) or \
       (os.path.basename(command[0] if command else "") == "strata-torture" and "--takeover" in command):
        two.append(t)

release = any(t["name"] == "fuzz" for t in tests)  # the optimized build runs the guests
check("the guest tests are found (%d)" % len(guests), len(guests) >= 4 if release else len(guests) == 0,
      [t["name"] for t in guests])
check("the two-controller tests are found (%d)" % len(two), len(two) >= 8, [t["name"] for t in two])
for t in guests:
    check("%s (a TCG guest) holds the lock timing" % t["name"], "timing" in prop(t, "RESOURCE_LOCK", []),
          prop(t, "RESOURCE_LOCK"))
for t in two:
    locks = prop(t, "RESOURCE_LOCK", [])
    check("%s (two controllers) holds the locks two_controllers and timing" % t["name"],
          "two_controllers" in locks and "timing" in locks, locks)

for t in tests:
    if "ceph" in (prop(t, "FIXTURES_REQUIRED") or []):
        check("%s (on the Ceph cluster) holds the lock ceph" % t["name"], "ceph" in prop(t, "RESOURCE_LOCK", []),
              prop(t, "RESOURCE_LOCK"))

quick = [t for t in tests if "quick" in prop(t, "LABELS", [])]
names = {t["name"] for t in quick}
check("the label quick holds the simulation's seeds", "sim" in names)
# A Catch2 test case: a test binary's, but for the runs on a ctest
# fixture (rbd_device, on the Ceph cluster) and the simulation.
catch = [t for t in tests if re.search(r"/tests/\w+_tests$", (t.get("command") or [""])[0])
         and t["name"] != "sim" and not prop(t, "FIXTURES_REQUIRED")]
check("the label quick holds every Catch2 test case (%d)" % len(catch),
      len(catch) > 400 and all("quick" in prop(t, "LABELS", []) for t in catch),
      [t["name"] for t in catch if "quick" not in prop(t, "LABELS", [])][:10])
check("... and no script (a daemon, a guest, a client)",
      not [t for t in quick if script_of(t).endswith((".sh", ".py"))],
      [t["name"] for t in quick if script_of(t).endswith((".sh", ".py"))])

print("%d failed" % failures if failures else "all ctest schedule checks passed")
sys.exit(1 if failures else 0)
