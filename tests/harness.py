"""What the Python tests of stratad share: checks that are counted and
printed, a free loopback port, and a stratad started on a small shelf.
   import sys, os; sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
   from harness import check, failed, free_port, start_stratad, finish"""
import atexit, socket, subprocess, sys

failed = []


def check(what, ok):
    """Prints the check and counts a failure; the test goes on."""
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failed.append(what)
    return ok


def free_port():
    """A loopback port free now (another process may take it before it is used)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_stratad(stratad, state, *extra, env=None, stderr=subprocess.DEVNULL):
    """stratad on a small shelf in `state`, on free loopback ports, NVMe/TCP
    off; returns (process, {"iscsi": P, "grpc": P, "http": P}) once it says
    it is ready. Killed at exit."""
    ports = {"iscsi": free_port(), "grpc": free_port(), "http": free_port()}
    p = subprocess.Popen([stratad, "--state-dir", state, "--small-shelf", "--nvme", "off", "--iscsi", "127.0.0.1:%d" % ports["iscsi"],
                          "--grpc", "127.0.0.1:%d" % ports["grpc"], "--http", "127.0.0.1:%d" % ports["http"], *extra],
                         stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    atexit.register(p.kill)
    for line in p.stdout:
        if "stratad is ready" in line:
            return p, ports
    sys.exit("stratad did not start (exit %s)" % p.wait())


def finish(name):
    """Says how it went and exits 1 on any failed check."""
    print("%s: %s" % (name, "%d failed" % len(failed) if failed else "all passed"))
    sys.exit(1 if failed else 0)
