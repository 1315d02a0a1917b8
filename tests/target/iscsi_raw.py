"""Raw iSCSI PDUs for protocol tests against strata-iscsi-target: start the
target, log in, send and receive PDUs byte by byte, so that tests can do
what no well-behaved initiator does (stay silent, reuse an ISID, send
digests, ask for odd task management)."""
import atexit, socket, struct, subprocess, sys, time

failures = []

def check(what, ok):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)

def finish(target):
    target.terminate()
    target.wait()
    sys.exit(1 if failures else 0)

def start(binary, *args):
    """Starts the target on a free loopback port; returns (process, port).
    The test's own arguments after the binary (e.g. --loops 3) go to every
    target it starts."""
    target = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--target", "iqn.x:t", *args, *sys.argv[2:]],
                              stdout=subprocess.PIPE, text=True)
    atexit.register(target.kill)  # also when a test dies of an exception
    line = target.stdout.readline()
    return target, int(line.split()[2].rsplit(":", 1)[1])

def crc32c(data, crc=0xffffffff):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc

def digest(data):
    return struct.pack('<I', crc32c(data) ^ 0xffffffff)

class Connection:
    def __init__(self, port, isid=bytes([0x80, 0, 0, 0, 0, 1]), host="127.0.0.1"):
        self.s = socket.create_connection((host, port))
        self.isid = isid
        self.cmd_sn = 1

    def recvn(self, n, timeout=10):
        self.s.settimeout(timeout)
        d = b""
        while len(d) < n:
            chunk = self.s.recv(n - len(d))
            if not chunk:
                raise EOFError("the target closed the connection")
            d += chunk
        return d

    def closed_within(self, seconds):
        """True if the target closes the connection within `seconds`
        (reading and dropping whatever it sends before)."""
        self.s.settimeout(seconds)
        try:
            while self.s.recv(4096):
                pass
            return True
        except (socket.timeout, TimeoutError):
            return False
        except ConnectionResetError:
            return True

    def login(self, csg, nsg, keys, tsih=0, cid=0, data=None, more=False):
        """A Login Request; `data` replaces the keys' text, `more` sets C
        (and clears T: the text goes on in the next request)."""
        if data is None:
            data = b"".join(k.encode() + b"=" + v.encode() + b"\0" for k, v in keys)
        bhs = bytearray(48); bhs[0] = 0x43; bhs[1] = (0x40 if more else 0x80) | (csg << 2) | (0 if more else nsg)
        bhs[5:8] = len(data).to_bytes(3, 'big'); bhs[8:14] = self.isid; bhs[14:16] = tsih.to_bytes(2, 'big')
        bhs[20:22] = cid.to_bytes(2, 'big')
        bhs[24:28] = self.cmd_sn.to_bytes(4, 'big')
        self.s.sendall(bytes(bhs) + data + b"\0" * ((4 - len(data) % 4) % 4))
        return self.receive()

    def full_login(self, initiator="iqn.x:i", extra=(), tsih=0, cid=0, first=(), target="iqn.x:t"):
        """Logs in to `target`: `first` are more keys for the first request,
        `extra` the operational stage's; `tsih` joins a session."""
        r, d = self.login(0, 1, [("InitiatorName", initiator), ("TargetName", target),
                                 ("AuthMethod", "None"), *first] +
                          ([] if tsih else [("SessionType", "Normal")]), tsih=tsih, cid=cid)
        if r[36] != 0:
            return r, d
        return self.login(1, 3, list(extra), tsih=tsih, cid=cid)

    def send(self, bhs, data=b""):
        bhs = bytearray(bhs); bhs[5:8] = len(data).to_bytes(3, 'big')
        self.s.sendall(bytes(bhs) + data + b"\0" * ((4 - len(data) % 4) % 4))

    def receive(self, timeout=10):
        r = self.recvn(48, timeout)
        dsl = int.from_bytes(r[5:8], 'big')
        d = self.recvn((dsl + 3) & ~3, timeout) if dsl else b""
        return r, d[:dsl]

    def tmf(self, function, lun=0, ref_tag=0xffffffff, ref_cmd_sn=0, itt=0x100, cmd_sn=None):
        bhs = bytearray(48); bhs[0] = 0x42; bhs[1] = 0x80 | function; bhs[9] = lun
        bhs[16:20] = itt.to_bytes(4, 'big'); bhs[20:24] = ref_tag.to_bytes(4, 'big')
        bhs[24:28] = (self.cmd_sn if cmd_sn is None else cmd_sn).to_bytes(4, 'big')
        bhs[32:36] = ref_cmd_sn.to_bytes(4, 'big')
        self.send(bhs)
        return self.receive()

    def scsi(self, cdb, itt, lun=0, read_bytes=0, write=b"", edtl=None, writes=None, attr=0):
        """A SCSI Command; `write` is its immediate data, `writes` says it is
        a write (the default: when it carries data); `attr` its task
        attribute (ATTR: 0 untagged, 1 simple, 2 ordered, 3 head of queue)."""
        bhs = bytearray(48); bhs[0] = 0x01
        writes = bool(write) if writes is None else writes
        bhs[1] = 0x80 | (0x40 if read_bytes else 0) | (0x20 if writes else 0) | attr; bhs[9] = lun
        bhs[16:20] = itt.to_bytes(4, 'big')
        bhs[20:24] = (edtl if edtl is not None else (read_bytes or len(write))).to_bytes(4, 'big')
        bhs[24:28] = self.cmd_sn.to_bytes(4, 'big'); self.cmd_sn += 1
        bhs[32:32 + len(cdb)] = cdb
        self.send(bhs, write)

_next_itt = [0x100]
def command(c, cdb, lun=0, read_bytes=0, write=b""):
    """Runs one SCSI command on `c` and waits for its end; returns (status,
    sense key, ASC, ASCQ, data-in)."""
    _next_itt[0] += 1
    c.scsi(cdb, _next_itt[0], lun=lun, read_bytes=read_bytes, write=write)
    data = b""
    while True:
        r, d = c.receive()
        if r[0] & 0x3f == 0x25:  # Data-In, perhaps with status
            data += d
            if r[1] & 0x01:
                return r[3], 0, 0, 0, data
            continue
        if r[0] & 0x3f == 0x21:
            if r[3] == 2 and len(d) >= 16:
                sense = d[2:]
                return 2, sense[2] & 0x0f, sense[12], sense[13], data
            return r[3], 0, 0, 0, data

def until(predicate, seconds, every=0.1):
    """True once predicate() is, polled for up to `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return False
