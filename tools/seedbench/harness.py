"""The pieces every seed experiment uses (README.md): a stratad built from a
TOML file on an empty state directory, its LUN exported over NBD by
qemu-storage-daemon (qemu's own iSCSI driver, libiscsi, is the initiator),
fio jobs on that export, and the array's counters from the CLI.

Everything a run creates lives under one directory in /var/tmp, removed when
the run ends, however it ends: the simulated shelf writes real data into
sparse files there.
"""
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = Path(__file__).resolve().parent / "configs"
TARGET = "iqn.2026-11.io.strata:array"


class BenchError(Exception):
    """A run that cannot go on: the words say what failed."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def say(*words):
    print(time.strftime("%H:%M:%S"), *words, flush=True)


class Started:
    """A context manager over _start() and close(); close() also runs when
    _start() fails part-way, and undoes what it had made."""

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()


class Array(Started):
    """One stratad on an empty state directory, built from configs/NAME.toml,
    and its LUN 0 as an NBD export (or, with export="fuse", as the file
    `lun_file` over FUSE, for a kernel file system). Use as a context
    manager."""

    def __init__(self, config, workdir, stratad, cli, loops=2, export="nbd"):
        self.config = CONFIGS / (config + ".toml")
        if not self.config.is_file():
            raise BenchError(f"no configuration {self.config}")
        self.name = config
        self.dir = Path(tempfile.mkdtemp(prefix=config + ".", dir=workdir))
        self.stratad, self.cli_path, self.loops = stratad, cli, loops
        self.iscsi_port, self.api_port = free_port(), free_port()
        self.procs = []
        self.nbd_socket = self.dir / "nbd.sock"
        self.export = export
        self.lun_file = self.dir / "lun"

    def _start(self):
        out = open(self.dir / "stratad.out", "w")
        err = open(self.dir / "stratad.err", "w")
        array = subprocess.Popen([self.stratad, "--config", str(self.config), "--state-dir", str(self.dir / "state"),
                                  "--iscsi", f"127.0.0.1:{self.iscsi_port}", "--nvme", "off",
                                  "--grpc", f"127.0.0.1:{self.api_port}", "--loops", str(self.loops)],
                                 stdout=out, stderr=err)
        self.procs.append(array)
        deadline = time.monotonic() + 300
        while "stratad is ready" not in (self.dir / "stratad.out").read_text():
            if array.poll() is not None:
                raise BenchError(f"stratad ({self.name}) exited: " + (self.dir / "stratad.err").read_text()[-2000:])
            if time.monotonic() > deadline:
                raise BenchError(f"stratad ({self.name}) not ready in 300 s")
            time.sleep(0.1)
        qsd_out = open(self.dir / "qsd.out", "w")
        blockdev = (f"driver=iscsi,node-name=lun,transport=tcp,portal=127.0.0.1:{self.iscsi_port},target={TARGET},"
                    "lun=0,initiator-name=iqn.2026-11.io.strata:seedbench,cache.direct=on")
        if self.export == "fuse":
            self.lun_file.touch()
            export = ["--export", f"type=fuse,id=lun,node-name=lun,mountpoint={self.lun_file},writable=on"]
            exported = lambda: self.lun_file.stat().st_size > 0  # noqa: E731
        else:
            export = ["--nbd-server", f"addr.type=unix,addr.path={self.nbd_socket}",
                      "--export", "type=nbd,id=nbd,node-name=lun,name=lun,writable=on"]
            exported = self.nbd_socket.exists
        qsd = subprocess.Popen(["qemu-storage-daemon", "--blockdev", blockdev, *export],
                               stdout=qsd_out, stderr=subprocess.STDOUT)
        self.procs.append(qsd)
        for _ in range(200):
            if exported() or qsd.poll() is not None:
                break
            time.sleep(0.1)
        if not exported():
            raise BenchError("qemu-storage-daemon did not export the LUN: " + (self.dir / "qsd.out").read_text()[-2000:])

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs = []
        if self.export == "fuse":
            subprocess.run(["umount", "-l", str(self.lun_file)], capture_output=True)
        mounted = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                   if line.split()[1].startswith(str(self.dir) + "/")]
        if mounted:  # removing the directory would reach into them
            say(f"seedbench: {', '.join(mounted)} still mounted: {self.dir} left in place")
            return
        shutil.rmtree(self.dir, ignore_errors=True)

    def cli(self, *args):
        r = subprocess.run([self.cli_path, "--api", f"127.0.0.1:{self.api_port}", "--json", *args],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise BenchError(f"strata {' '.join(args)}: {r.stderr.strip() or r.stdout.strip()}")
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def volume_stats(self):
        return self.cli("volume", "stats", "pools/p1/volumes/v1")

    def pool_stats(self):
        return self.cli("pool", "stats", "p1")

    def cpu_seconds(self):
        """CPU time so far: stratad's, qemu-storage-daemon's, and the
        machine's busy and total (all cores), in seconds."""
        tick = os.sysconf("SC_CLK_TCK")

        def of(pid):
            try:
                f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(f[11]) + int(f[12])) / tick
            except (OSError, IndexError, ValueError):
                return 0.0
        cpu = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = cpu[3] + cpu[4]
        return {"stratad": of(self.procs[0].pid), "qsd": of(self.procs[1].pid) if len(self.procs) > 1 else 0.0,
                "busy": (sum(cpu) - idle) / tick, "total": sum(cpu) / tick}

    def fio(self, name, *args, logs=False):
        """One fio run on the LUN; its JSON summary, with the CPU the run
        took under "cpu" (stratad's and qemu-storage-daemon's cores, the
        machine's busy fraction), and, with `logs`, the per-second IOPS and
        latency logs' path prefix."""
        out = self.dir / (name + ".json")
        cmd = ["fio", "--name=" + name, "--ioengine=nbd", f"--uri=nbd+unix:///lun?socket={self.nbd_socket}",
               "--output-format=json", "--output=" + str(out), *args]
        if logs:
            cmd += ["--write_iops_log=" + str(self.dir / name), "--write_lat_log=" + str(self.dir / name),
                    "--log_avg_msec=1000"]
        before, t0 = self.cpu_seconds(), time.monotonic()
        r = subprocess.run(cmd, capture_output=True, text=True)
        after, wall = self.cpu_seconds(), time.monotonic() - t0
        if r.returncode != 0:
            raise BenchError(f"fio {name}: {r.stderr.strip()[-2000:] or r.stdout.strip()[-2000:]}")
        text = out.read_text()
        try:  # fio may put its warnings ahead of the JSON
            result = json.loads(text[text.index("{"):])
        except ValueError:
            raise BenchError(f"fio {name} wrote no JSON: {text[:2000]}") from None
        result["cpu"] = {"stratad_cores": (after["stratad"] - before["stratad"]) / wall,
                         "qsd_cores": (after["qsd"] - before["qsd"]) / wall,
                         "machine_busy": (after["busy"] - before["busy"]) / max(1e-9, after["total"] - before["total"])}
        return result, self.dir / name


class Postgres(Started):
    """PostgreSQL (Debian's, its defaults: fsync, synchronous commit) with
    its data directory on ext4 on the array's LUN: the FUSE file, a loop
    device over it, the kernel's journalled ext4. A commit's flush reaches
    the LUN as SYNCHRONIZE CACHE. (Not the loop's direct I/O: over
    qemu-storage-daemon 7.2's FUSE export it loses writes of 1 MiB and
    more, with a plain file behind the export as well.) The WAL is held to
    256 MB between checkpoints (the LUNs here are small). The server runs
    in a memory cgroup of `memory_bytes` (its shared buffers and the page
    cache its reads fill), so that a database larger than that reads from
    the array, as on a server whose database outgrew its memory. Use as a
    context manager; needs root."""

    def __init__(self, array, memory_bytes):
        self.array = array
        self.memory_bytes = memory_bytes
        self.cgroup = None
        self.mnt, self.sock = array.dir / "mnt", array.dir / "sock"
        self.port = free_port()
        self.bin = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: float(p.parent.name))[-1]
        self.loop = None
        self.started = False

    def _run(self, *args, user=None, what=None):
        cmd = ["su", user, "-c", " ".join(str(a) for a in args)] if user else [str(a) for a in args]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"{what or args[0]} failed: {(r.stderr or r.stdout).strip()[-2000:]}")
        return r.stdout

    def _start(self):
        if os.geteuid() != 0:
            raise BenchError("needs root (a loop device, a mount; PostgreSQL runs as postgres)")
        self.mnt.mkdir()
        self.sock.mkdir()
        shutil.chown(self.sock, "postgres")
        os.chmod(self.array.dir, 0o755)
        self.loop = self._run("losetup", "--find", "--show", str(self.array.lun_file)).strip()
        self._run("mkfs.ext4", "-q", "-F", "-E", "nodiscard", self.loop)
        self._run("mount", "-o", "noatime", self.loop, self.mnt)
        (self.mnt / "pg").mkdir()
        shutil.chown(self.mnt / "pg", "postgres", "postgres")
        data = self.mnt / "pg" / "data"
        self._run(self.bin / "initdb", "-D", data, "-N", "-A", "trust", user="postgres", what="initdb")
        self.cgroup = memory_cgroup(f"strata-seedbench-{os.getpid()}-{self.port}", self.memory_bytes)
        start = (f"{self.bin / 'pg_ctl'} -D {data} -l {self.mnt / 'pg' / 'log'} -w "
                 f"-o \"-p {self.port} -k {self.sock} -c listen_addresses='' -c max_wal_size=256MB\" start")
        # The server and everything it forks join the cgroup: the shell that starts it joins first.
        r = subprocess.run(["sh", "-c", f"echo $$ > {self.cgroup / 'cgroup.procs'} && exec su postgres -c \"$0\"", start],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"pg_ctl start failed: {(r.stderr or r.stdout).strip()[-2000:]}")
        self.started = True

    def client(self, tool, *args):
        """Runs psql or pgbench against the database; returns its output."""
        return self._run(self.bin / tool, "-h", self.sock, "-p", self.port, "-U", "postgres", *args, "postgres")

    def close(self):
        """Stops the server (immediately: the database is thrown away, and a
        shutdown checkpoint on the HDDs alone takes minutes), unmounts, and
        detaches the loop device. Raises if the file system stays mounted:
        removing the run's directory would then reach into it."""
        if self.started:
            subprocess.run(["su", "postgres", "-c",
                            f"{self.bin / 'pg_ctl'} -D {self.mnt / 'pg' / 'data'} -m immediate -w stop"],
                           capture_output=True)
            self.started = False
        if os.path.ismount(self.mnt):
            for _ in range(60):  # the server's last processes may still hold files open
                if subprocess.run(["umount", str(self.mnt)], capture_output=True).returncode == 0:
                    break
                time.sleep(0.5)
            else:
                subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True)
        if self.loop:
            subprocess.run(["losetup", "-d", self.loop], capture_output=True)
            self.loop = None
        if self.cgroup:
            for _ in range(20):
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.5)
            else:
                say(f"seedbench: could not remove the memory cgroup {self.cgroup}")
            self.cgroup = None
        if os.path.ismount(self.mnt):
            raise BenchError(f"{self.mnt} is still mounted")


def memory_cgroup(name, limit_bytes):
    """A new memory cgroup limited to `limit_bytes` (page cache included):
    cgroup v2's memory.max where the unified hierarchy has the memory
    controller, else v1's memory.limit_in_bytes."""
    unified = Path("/sys/fs/cgroup")
    controllers = unified / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        group, limit = unified / name, "memory.max"
        subtree = unified / "cgroup.subtree_control"
        if "memory" not in subtree.read_text().split():  # a child has memory.max only once its parent hands it down
            try:
                subtree.write_text("+memory")
            except OSError as e:
                raise BenchError(f"cannot enable the memory controller in {subtree}: {e}")
    elif Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        group, limit = Path("/sys/fs/cgroup/memory") / name, "memory.limit_in_bytes"
    else:
        raise BenchError("no memory cgroup controller: cannot bound the database server's memory")
    try:
        group.mkdir()
        (group / limit).write_text(str(limit_bytes))
    except OSError as e:
        raise BenchError(f"cannot make the memory cgroup {group}: {e}")
    return group


def summary(result):
    """IOPS, the mean latency over reads and writes (ms), read mean and p99
    (ms), write mean (ms), from one fio JSON result (all jobs summed); and
    the CPU: stratad's and qemu-storage-daemon's cores, stratad's CPU per
    I/O (µs), the machine's busy fraction."""
    iops = lat_sum = n = 0.0
    read_lat, write_lat, read_p99 = [], [], []
    for job in result["jobs"]:
        for side, keep in (("read", read_lat), ("write", write_lat)):
            s = job[side]
            if s["total_ios"] == 0:
                continue
            iops += s["iops"]
            lat_sum += s["clat_ns"]["mean"] * s["total_ios"]
            n += s["total_ios"]
            keep.append((s["clat_ns"]["mean"], s["total_ios"]))
            if side == "read":
                read_p99.append(s["clat_ns"]["percentile"]["99.000000"])
    weighted = lambda xs: sum(m * c for m, c in xs) / sum(c for _, c in xs) / 1e6 if xs else 0.0
    cpu = result.get("cpu", {})
    return {"iops": iops, "latency_ms": lat_sum / n / 1e6 if n else 0.0, "read_ms": weighted(read_lat),
            "read_p99_ms": max(read_p99) / 1e6 if read_p99 else 0.0, "write_ms": weighted(write_lat),
            "stratad_cores": cpu.get("stratad_cores", 0.0), "qsd_cores": cpu.get("qsd_cores", 0.0),
            "machine_busy": cpu.get("machine_busy", 0.0),
            "stratad_us_per_io": cpu.get("stratad_cores", 0.0) / iops * 1e6 if iops else 0.0}


def median_of(runs):
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def per_second_log(prefix):
    """fio's averaged per-job logs PREFIX.N.log (time ms, value, direction,
    ...) summed over the jobs, as sorted (second, value) pairs."""
    out = {}
    for path in Path(prefix).parent.glob(Path(prefix).name + ".*.log"):
        for line in path.read_text().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) >= 2:
                second = round(int(f[0]) / 1000)
                out[second] = out.get(second, 0) + int(f[1])
    return sorted(out.items())


class Sampler:
    """Reads the volume's statistics every `period` seconds on a thread
    while a run goes on: the cache hit fraction and the SSD tier's share
    over time."""

    def __init__(self, array, period=1.0):
        self.array, self.period = array, period
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.wait(self.period):
            with contextlib.suppress(BenchError, subprocess.TimeoutExpired, json.JSONDecodeError):
                s = self.array.volume_stats()
                self.samples.append((time.monotonic() - self.t0, s))
