#!/usr/bin/env python3
"""The strata command line itself, with no array: --help and a command's
--help, --version (the tree's version, the one the API reports), usage
errors that name the wrong argument and exit 2, an array that cannot be
reached (exit 3), and the bash completion: `strata completion bash` is the
committed tools/strata/strata.bash-completion, and bash completes with it;
`strata system` hands its words to the appliance's strata-system.
   strata_cli_test.py PATH/TO/strata SOURCE_DIR"""
import os, re, subprocess, sys, tempfile

cli, source = sys.argv[1], sys.argv[2]
failures = 0

def check(what, ok, detail=""):
    global failures
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, "" if ok or not detail else "\n    " + str(detail)[:1500]))
    if not ok:
        failures += 1

def strata(*words):
    return subprocess.run([cli, *words], capture_output=True, text=True, timeout=30)

r = strata("--help")
check("strata --help: exit 0, every command and the environment", r.returncode == 0 and
      all(w in r.stdout for w in ["controller", "disk", "group", "pool", "volume", "host", "map", "unmap", "op", "events",
                                  "version", "heat", "--api", "--tls-ca", "--token-file", "--json", "STRATA_TLS_CA",
                                  "STRATA_TOKEN_FILE", "Exit status"]), r.stdout + r.stderr)
check("... without the hidden completion command", "completion" not in r.stdout)
r = strata("volume", "create", "--help")
check("strata volume create --help: its options with their values", r.returncode == 0 and
      all(w in r.stdout for w in ["--size SIZE", "REQUIRED", "--pool", "--affinity auto|performance|capacity", "--block-size 512|4096",
                                  "--write-cache write-back|write-through", "NAME"]), r.stdout)
r = strata("volume", "list", "--help")
check("strata volume list --help: every pool's volumes, or one pool's (POOL or --pool POOL)", r.returncode == 0 and
      all(w in r.stdout for w in ["every pool", "POOL", "--pool POOL"]) and "default p1" not in r.stdout, r.stdout)
r = strata("heat", "map", "--help")
check("strata heat map --help: --since, --png, --svg, --metadata", r.returncode == 0 and
      all(w in r.stdout for w in ["--since", "--png", "--svg", "--metadata DIR", "24h"]), r.stdout)

# The tree's version: the project's in CMakeLists.txt, STRATA_VERSION's default (tools/version.h).
version = re.search(r'project\(strata VERSION ([^ )]+)', open(os.path.join(source, "CMakeLists.txt")).read()).group(1)
r = strata("--version")
check("strata --version: the CLI's own, the API's version (%s)" % version, r.returncode == 0 and r.stdout.strip() == "strata " + version,
      r.stdout)

def refused(words, names, what):
    r = strata(*words)
    check("%s: exit 2, naming %s" % (what, names), r.returncode == 2 and names in r.stderr, (r.returncode, r.stderr))

refused(["--api", "127.0.0.1:1", "disk", "frobnicate"], "frobnicate", "an unknown verb")
refused(["volume", "create", "v1", "--sise", "1G"], "--sise", "an unknown option")
refused(["volume", "create", "v1"], "--size", "a missing option")
refused(["volume", "create", "v1", "--size", "12Q"], "--size", "a size that is not one")
refused(["volume", "create", "v1", "--size", "1G", "--block-size", "1024"], "--block-size 1024 is not 512 or 4096", "a block size")
refused(["disk", "show"], "NAME", "a missing NAME")
refused(["volume", "list", "p1", "--pool", "p2"], "--pool p2", "volume list with POOL and --pool naming two pools")
refused(["events", "--limit", "0"], "--limit", "a limit out of range")
refused(["heat", "map", "pools/p1", "--since", "yesterday"], "--since", "a --since that is not a time")
refused(["heat", "report", "pools/p1", "--since", "2026-13-01"], "--since", "a date that is not one")
refused(["heat", "map", "pools/p1", "--png", "a.png", "--svg", "a.svg"], "--png", "both --png and --svg")
refused(["heat", "map", "pools/p1", "--metadata", "/nonexistent/strata"], "--metadata", "a metadata directory that is not one")
refused(["--token-file", "/etc/hostname", "disk", "list"], "needs TLS", "a token without TLS")
refused([], "what to do", "no command")
r = strata("--api", "127.0.0.1:1", "disk", "list")
check("an array that cannot be reached: exit 3", r.returncode == 3, r.stderr)
r = strata("--api", "127.0.0.1:1", "disk", "list", "--json")
check("... the top-level options after the command too (exit 3, not 2)", r.returncode == 3, r.stderr)

# Bash completion: generated, committed, and working.
committed = open(os.path.join(source, "tools", "strata", "strata.bash-completion")).read()
r = strata("completion", "bash")
check("strata completion bash is the committed tools/strata/strata.bash-completion (regenerate it if this fails)",
      r.returncode == 0 and r.stdout == committed)
with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as script:
    script.write("""source %s
t() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _strata; echo "${COMPREPLY[*]}"; }
t strata vol
t strata --api 127.0.0.1:1 volume cr
t strata volume create v1 --affinity ""
t strata pool move p1 --to ""
t strata heat map pools/p1 --s
t strata --json disk add d1 --kind ""
""" % os.path.join(source, "tools", "strata", "strata.bash-completion"))
r = subprocess.run(["bash", script.name], capture_output=True, text=True)
os.unlink(script.name)
want = ["volume", "create", "auto performance capacity", "a b", "--svg --since", "hdd ssd"]
got = r.stdout.splitlines()
check("bash completes commands, verbs and option values with it", r.returncode == 0 and r.stderr == "" and len(got) == len(want) and
      all(sorted(g.split()) == sorted(w.split()) for g, w in zip(got, want)), (got, r.stderr))

# strata system: handed to the appliance's strata-system (STRATA_SYSTEM here: a script that says what it was given).
with tempfile.TemporaryDirectory() as d:
    fake = os.path.join(d, "strata-system")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\necho "given: $*"\nexit 7\n')
    os.chmod(fake, 0o755)
    env = dict(os.environ, STRATA_SYSTEM=fake)
    r = subprocess.run([cli, "system", "upgrade", "/images/strata-0.2.raw", "--tries", "1", "--no-reboot"], capture_output=True,
                       text=True, timeout=30, env=env)
    check("strata system upgrade runs strata-system with the image and options, and exits as it does",
          r.returncode == 7 and r.stdout.strip() == "given: upgrade /images/strata-0.2.raw --tries 1 --no-reboot", (r.returncode, r.stdout, r.stderr))
    r = subprocess.run([cli, "system", "status"], capture_output=True, text=True, timeout=30, env=env)
    check("strata system status likewise", r.returncode == 7 and r.stdout.strip() == "given: status", (r.returncode, r.stdout))
    r = subprocess.run([cli, "system", "status"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, STRATA_SYSTEM=os.path.join(d, "missing")))
    check("strata system off an appliance: exit 1, saying where strata-system comes from",
          r.returncode == 1 and "strata-appliance" in r.stderr, (r.returncode, r.stderr))
r = strata("system", "upgrade")
check("strata system upgrade without IMAGE: exit 2, naming it", r.returncode == 2 and "IMAGE" in r.stderr, r.stderr)

print("PASS" if failures == 0 else "FAILED: %d" % failures)
sys.exit(1 if failures else 0)
