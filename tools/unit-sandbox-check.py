#!/usr/bin/python3
"""Runs stratad under an imitation of its systemd unit's sandbox, on a
machine without systemd as PID 1 (a container, a CI runner), and checks
that the array still starts, serves, pings its watchdog and stops cleanly.
The real proof is the unit under systemd (the appliance's VM); this finds
the sandbox settings that would break the daemon before that.

  unit-sandbox-check.py UNIT STRATAD STRATA_CLI [--config FILE] [--timeout S]
  unit-sandbox-check.py UNIT - - --probe COMMAND...   (COMMAND in the sandbox: a negative control)

UNIT is debian/stratad.service. As root (mount namespace, capabilities).
What is imitated, from the unit's own lines:
  SystemCallFilter= (allow list and ~deny lists, expanded by
    systemd-analyze syscall-filter, so the groups are systemd 252's own),
    SystemCallErrorNumber=EPERM, SystemCallArchitectures=native;
  RestrictAddressFamilies= (socket() of other families: EAFNOSUPPORT);
  MemoryDenyWriteExecute= (mmap W+X, mprotect/pkey_mprotect +X: EPERM);
  RestrictNamespaces= (unshare, setns, clone with CLONE_NEW*: EPERM; clone3: ENOSYS);
  CapabilityBoundingSet=, NoNewPrivileges=;
  ProtectSystem=strict (every mount read-only but the state directory),
    PrivateTmp=, ProtectHome=, ProtectProc=invisible + ProcSubset=pid,
    ProtectKernelTunables= (/sys read-only), in a private mount namespace;
  Type=notify + NotifyAccess=main: a NOTIFY_SOCKET that takes READY=1,
    WATCHDOG=1 and STOPPING=1 only from the main process (its pid checked
    with SCM_CREDENTIALS), and WATCHDOG_USEC from WatchdogSec=;
  LimitNOFILE=.
Not imitated: DevicePolicy=/DeviceAllow= (the cgroup device filter: the
shipped configuration's drives are sparse files), PrivateIPC=, ProtectClock=,
ProtectHostname=, LockPersonality=, RestrictRealtime= (covered by
~@resources), RestrictSUIDSGID=, UMask=.
The state directory is a scratch directory (/var/lib/strata-sandbox-check-*,
removed after) bind-mounted at /var/lib/strata in the namespace: the
machine's own is never touched.
Exit status 0 if every check passed."""
import argparse, ctypes, errno, os, re, resource, shutil, signal, socket, struct, subprocess, sys, tempfile, time

import seccomp

failures = 0
cleanup = {"work": None, "mountpoint": False, "child": None}  # undone at exit, whatever happened


def check(what, ok, detail=""):
    global failures
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, "" if ok or not detail else "\n    " + str(detail)[:2000]), flush=True)
    if not ok:
        failures += 1


def unit_values(path):
    """KEY -> list of values (each line's), as systemd reads a unit (no drop-ins)."""
    values, text = {}, open(path).read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values.setdefault(key.strip(), []).append(value.strip())
    return values


def expand(names, seen=None):
    """Syscall names of a SystemCallFilter= list, groups expanded by systemd-analyze."""
    out = set()
    for name in names:
        if name.startswith("@"):
            listing = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True, text=True, check=True).stdout
            members = [l.strip() for l in listing.splitlines()[1:] if l.strip() and not l.strip().startswith("#")]
            out |= expand(members)
        else:
            out.add(name)
    return out


def seconds(text):
    m = re.fullmatch(r"(\d+)\s*(ms|s|min)?", text)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "min": 60, None: 1}[m.group(2)]


CAPS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5,
        "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_LINUX_IMMUTABLE": 9, "CAP_NET_BIND_SERVICE": 10,
        "CAP_NET_BROADCAST": 11, "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_IPC_OWNER": 15,
        "CAP_SYS_MODULE": 16, "CAP_SYS_RAWIO": 17, "CAP_SYS_CHROOT": 18, "CAP_SYS_PTRACE": 19, "CAP_SYS_PACCT": 20,
        "CAP_SYS_ADMIN": 21, "CAP_SYS_BOOT": 22, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24, "CAP_SYS_TIME": 25,
        "CAP_SYS_TTY_CONFIG": 26, "CAP_MKNOD": 27, "CAP_LEASE": 28, "CAP_AUDIT_WRITE": 29, "CAP_AUDIT_CONTROL": 30,
        "CAP_SETFCAP": 31, "CAP_MAC_OVERRIDE": 32, "CAP_MAC_ADMIN": 33, "CAP_SYSLOG": 34, "CAP_WAKE_ALARM": 35,
        "CAP_BLOCK_SUSPEND": 36, "CAP_AUDIT_READ": 37, "CAP_PERFMON": 38, "CAP_BPF": 39, "CAP_CHECKPOINT_RESTORE": 40}
FAMILIES = {"AF_UNIX": 1, "AF_INET": 2, "AF_INET6": 10, "AF_NETLINK": 16, "AF_PACKET": 17}
CLONE_NEW = [0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080]
PROT_WRITE, PROT_EXEC = 2, 4
libc = ctypes.CDLL(None, use_errno=True)


def sh(*argv):
    subprocess.run(argv, check=True)


def enter_sandbox(v, state):
    """In the child, before exec: the namespace, the mounts, the capabilities, the filters."""
    if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    sh("mount", "--make-rprivate", "/")
    # ProtectSystem=strict: every mount read-only, /dev /proc /sys aside (ProtectKernelTunables: /sys too).
    mounts = [l.split()[4] for l in open("/proc/self/mountinfo")]
    for mp in sorted(set(mounts), key=len):
        if mp.startswith(("/dev", "/proc")) or not os.path.isdir(mp):
            continue
        subprocess.run(["mount", "-o", "remount,bind,ro", mp], stderr=subprocess.DEVNULL)
    # StateDirectory=strata, the one writable place (bound before /var/tmp is hidden).
    sh("mount", "--bind", state, "/var/lib/strata")
    sh("mount", "-o", "remount,bind,rw", "/var/lib/strata")
    for tmp in ["/tmp", "/var/tmp"]:  # PrivateTmp=
        sh("mount", "-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", tmp)
    for home in ["/root", "/home", "/run/user"]:  # ProtectHome=yes: empty and read-only
        if os.path.isdir(home):
            sh("mount", "-t", "tmpfs", "-o", "ro,mode=0755", "tmpfs", home)
    # ProtectProc=invisible, ProcSubset=pid
    sh("mount", "-t", "proc", "-o", "nosuid,nodev,noexec,hidepid=invisible,subset=pid", "proc", "/proc")

    if "LimitNOFILE" in v:
        n = int(v["LimitNOFILE"][-1])
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < n:  # no CAP_SYS_RESOURCE here (a container): what it allows
            print("sandbox: LimitNOFILE=%d above this machine's hard limit: %d" % (n, hard), file=sys.stderr, flush=True)
            n = hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    # CapabilityBoundingSet=: every other capability dropped from the bounding set.
    keep = {CAPS[c] for line in v.get("CapabilityBoundingSet", []) for c in line.split()}
    last = int(open("/proc/sys/kernel/cap_last_cap").read()) if os.path.exists("/proc/sys/kernel/cap_last_cap") else 40
    for cap in range(last + 1):
        if cap not in keep and libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP %d" % cap)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS (NoNewPrivileges=)

    # SystemCallFilter=: the allow lists, then the ~deny lists taken out (as systemd combines them).
    allowed = set()
    for line in v.get("SystemCallFilter", []):
        if line.startswith("~"):
            allowed -= expand(line[1:].split())
        else:
            allowed |= expand(line.split())
    err = getattr(errno, v.get("SystemCallErrorNumber", ["EPERM"])[-1])
    allow = seccomp.SyscallFilter(defaction=seccomp.ERRNO(err))  # native architecture only
    for name in sorted(allowed):
        try:
            allow.add_rule(seccomp.ALLOW, name)
        except (RuntimeError, ValueError):
            pass  # a name this libseccomp does not know (not on this architecture)
    # The other restrictions: a second filter, default allow (seccomp filters stack, the strictest wins).
    rest = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    families = {FAMILIES[f] for line in v.get("RestrictAddressFamilies", []) for f in line.split()}
    if families:
        for fam in range(46):
            if fam not in families:
                rest.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, fam))
    if v.get("MemoryDenyWriteExecute", ["no"])[-1] == "yes":
        rest.add_rule(seccomp.ERRNO(errno.EPERM), "mmap", seccomp.Arg(2, seccomp.MASKED_EQ, PROT_WRITE | PROT_EXEC, PROT_WRITE | PROT_EXEC))
        rest.add_rule(seccomp.ERRNO(errno.EPERM), "mprotect", seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
        rest.add_rule(seccomp.ERRNO(errno.EPERM), "pkey_mprotect", seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
    if v.get("RestrictNamespaces", ["no"])[-1] == "yes":
        rest.add_rule(seccomp.ERRNO(errno.EPERM), "unshare")
        rest.add_rule(seccomp.ERRNO(errno.EPERM), "setns")
        for flag in CLONE_NEW:
            rest.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        rest.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")  # as systemd: glibc falls back to clone
    rest.load()
    allow.load()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("unit")
    ap.add_argument("stratad")
    ap.add_argument("cli")
    ap.add_argument("--config", help="the configuration file (default: the one ExecStart names)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds for a start (default 600)")
    ap.add_argument("--probe", nargs=argparse.REMAINDER, help="run this command in the sandbox instead (a negative control)")
    args = ap.parse_args()
    v = unit_values(args.unit)
    if args.probe:
        made_mountpoint = not os.path.exists("/var/lib/strata")
        os.makedirs("/var/lib/strata", exist_ok=True)
        state = tempfile.mkdtemp(prefix="strata-sandbox-check-", dir="/var/lib")
        child = os.fork()
        if child == 0:
            try:
                enter_sandbox(v, state)
                os.execvp(args.probe[0], args.probe)
            except BaseException as e:
                print("sandbox: %s" % e, file=sys.stderr, flush=True)
                os._exit(127)
        status = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
        shutil.rmtree(state)
        if made_mountpoint:
            os.rmdir("/var/lib/strata")
        return status
    argv = v["ExecStart"][-1].split()
    argv[0] = os.path.abspath(args.stratad)
    if args.config:
        argv[argv.index("--config") + 1] = os.path.abspath(args.config)
    watchdog_s = seconds(v["WatchdogSec"][-1])
    # Not under /tmp or /var/tmp, which PrivateTmp= hides from the daemon.
    work = tempfile.mkdtemp(prefix="strata-sandbox-check-", dir="/var/lib")
    made_mountpoint = not os.path.exists("/var/lib/strata")
    os.makedirs("/var/lib/strata", exist_ok=True)  # the mount point only: never written here
    cleanup.update(work=work, mountpoint=made_mountpoint)
    state = os.path.join(work, "state")
    os.makedirs(state)
    notify_path = os.path.join(work, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)

    def start(label):
        child = os.fork()
        if child == 0:
            try:
                enter_sandbox(v, state)
                env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NOTIFY_SOCKET": notify_path,
                       "WATCHDOG_USEC": str(int(watchdog_s * 1e6)), "WATCHDOG_PID": str(os.getpid())}
                os.execve(argv[0], argv, env)
            except BaseException as e:  # never back into the parent's code
                print("sandbox: %s" % e, file=sys.stderr, flush=True)
                os._exit(127)
        cleanup["child"] = child
        print("%s: pid %d: %s" % (label, child, " ".join(argv)), flush=True)
        return child

    def wait_for(child, word, timeout, pings=None):
        """Notifications until one carries `word`; each sender's pid must be the main pid."""
        deadline, others = time.monotonic() + timeout, []
        while time.monotonic() < deadline:
            notify.settimeout(max(0.1, min(1.0, deadline - time.monotonic())))
            try:
                data, anc, _, _ = notify.recvmsg(4096, socket.CMSG_SPACE(12))
            except socket.timeout:
                if os.waitpid(child, os.WNOHANG) != (0, 0):
                    return None, others
                continue
            pid = next((struct.unpack("iII", d)[0] for lvl, t, d in anc if t == socket.SCM_CREDENTIALS), None)
            if pid != child:
                others.append(pid)
            text = data.decode()
            if pings is not None and "WATCHDOG=1" in text:
                pings.append(time.monotonic())
            if word in text.split("\n"):
                return time.monotonic(), others
        return None, others

    # First start: the array built on an empty state directory, as at installation.
    t0 = time.monotonic()
    child = start("first start")
    ready, others = wait_for(child, "READY=1", args.timeout)
    check("first start: READY=1 within %ds (%.1f s; the unit's TimeoutStartSec=%s)" % (args.timeout, (ready or t0) - t0, v["TimeoutStartSec"][-1]),
          ready is not None)
    check("every notification came from the main process (NotifyAccess=main)", not others, others)
    if ready is None:
        try:
            if os.waitpid(child, os.WNOHANG) == (0, 0):
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
        except ChildProcessError:
            pass  # reaped already
        return finish(work, made_mountpoint)
    r = subprocess.run([args.cli, "--api", "127.0.0.1:50051", "controller", "list"], capture_output=True, text=True, timeout=60)
    check("strata --api 127.0.0.1:50051 controller list", r.returncode == 0, r.stdout + r.stderr)
    print(r.stdout, end="")
    r = subprocess.run([args.cli, "--api", "127.0.0.1:50051", "volume", "list"], capture_output=True, text=True, timeout=60)
    check("strata volume list", r.returncode == 0, r.stdout + r.stderr)
    try:  # the HTTP side: /metrics reads the process's own /proc files (ProcSubset=pid leaves those)
        import urllib.request
        with urllib.request.urlopen("http://127.0.0.1:8080/metrics", timeout=30) as m:
            body = m.read().decode()
        check("GET http://127.0.0.1:8080/metrics", m.status == 200 and "strata_" in body, body[:300])
    except OSError as e:
        check("GET http://127.0.0.1:8080/metrics", False, e)
    if shutil.which("iscsi-ls"):
        r = subprocess.run(["iscsi-ls", "iscsi://127.0.0.1:3260"], capture_output=True, text=True, timeout=60)
        check("iscsi-ls iscsi://127.0.0.1:3260 finds the target", r.returncode == 0 and "iqn." in r.stdout, r.stdout + r.stderr)
    pings = []
    wait_for(child, "NO-SUCH-MESSAGE", watchdog_s * 1.5, pings)
    gaps = [b - a for a, b in zip(pings, pings[1:])]
    check("WATCHDOG=1 pings within WatchdogSec=%gs (%d pings in %gs, largest gap %.1f s)" % (watchdog_s, len(pings), watchdog_s * 1.5, max(gaps or [0])),
          len(pings) >= 2 and max(gaps) < watchdog_s, pings)
    os.kill(child, signal.SIGTERM)
    stopping, _ = wait_for(child, "STOPPING=1", 60)
    check("SIGTERM: STOPPING=1", stopping is not None)
    _, status = os.waitpid(child, 0)
    check("SIGTERM: exit 0 (a clean stop)", os.waitstatus_to_exitcode(status) == 0, status)

    # Second start: the same state (an upgrade's restart, a reboot).
    t0 = time.monotonic()
    child = start("restart")
    ready, others = wait_for(child, "READY=1", args.timeout)
    check("restart on the same state: READY=1 (%.1f s)" % ((ready or t0) - t0), ready is not None)
    if ready is not None:
        r = subprocess.run([args.cli, "--api", "127.0.0.1:50051", "volume", "list"], capture_output=True, text=True, timeout=60)
        check("restart: the same volumes", r.returncode == 0 and "v1" in r.stdout, r.stdout + r.stderr)
        os.kill(child, signal.SIGTERM)
    else:
        os.kill(child, signal.SIGKILL)
    _, status = os.waitpid(child, 0)
    check("restart: exit 0 after SIGTERM", ready is not None and os.waitstatus_to_exitcode(status) == 0, status)
    return finish(work, made_mountpoint)


def finish(work, made_mountpoint):
    undo()
    print("%d failure(s)" % failures)
    return 1 if failures else 0


def undo():
    if cleanup["child"]:
        try:  # only while it is still our unreaped child (a reaped pid may be another's by now)
            if os.waitpid(cleanup["child"], os.WNOHANG) == (0, 0):
                os.kill(cleanup["child"], signal.SIGKILL)
                os.waitpid(cleanup["child"], 0)
        except ChildProcessError:
            pass
        cleanup["child"] = None
    if cleanup["work"]:
        shutil.rmtree(cleanup["work"], ignore_errors=True)
        cleanup["work"] = None
    if cleanup["mountpoint"] and os.path.isdir("/var/lib/strata") and not os.listdir("/var/lib/strata"):
        os.rmdir("/var/lib/strata")
        cleanup["mountpoint"] = False


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        undo()
