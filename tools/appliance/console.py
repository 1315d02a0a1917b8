#!/usr/bin/env python3
"""Drives the appliance's serial console (QEMU's chardev socket) the way an
administrator would: log in as root with the password first boot printed,
run a command, read its output and exit status. For test-image.sh.

  console.py SOCKET login PASSWORD [TIMEOUT_S]
  console.py SOCKET run TIMEOUT_S COMMAND...   (exit status: the command's)

Each run ends the command with a marker line carrying `$?`; the tty's echo
is turned off at login so the output is the command's own.
"""
import re
import secrets
import socket
import sys
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.settimeout(0.5)
    return s


def read_until(s, pattern, timeout_s, sent=b""):
    """Reads until `pattern` (bytes regex) matches what arrived; returns it all."""
    got = b""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        except socket.timeout:
            pass
        m = re.search(pattern, got)
        if m:
            return got, m
    raise TimeoutError(f"no {pattern!r} within {timeout_s} s; last output: {got[-600:]!r}")


def login(path, password, timeout_s):
    s = connect(path)
    deadline = time.monotonic() + timeout_s
    # A prompt already logged in, or the getty's login prompt.
    while True:
        s.sendall(b"\r")
        try:
            got, m = read_until(s, rb"(login: $|login: |# $|# \Z)", 5)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise
    if b"login:" in m.group(0):
        s.sendall(b"root\r")
        read_until(s, rb"Password: ", 30)
        s.sendall(password.encode() + b"\r")
        read_until(s, rb"# ", 60)
    # No echo, no kernel chatter, a plain prompt: the output is the command's.
    s.sendall(b"stty -echo; export TERM=dumb PS1='# '; dmesg -n 1\r")
    read_until(s, rb"# ", 30)
    s.close()


def run(path, timeout_s, command):
    s = connect(path)
    nonce = secrets.token_hex(6)
    # The marker's text is split in the command so only its output matches.
    # `stty -echo` again first: a program before (dpkg's progress bar, a
    # pager) may have turned the echo back on.
    s.sendall(f"stty -echo; {command}; echo __done_\"{nonce}\" rc=$?\r".encode())
    got, m = read_until(s, rf"__done_{nonce} rc=(\d+)".encode(), timeout_s)
    s.close()
    out = got[: m.start()].decode(errors="replace").replace("\r", "")
    # If the tty echoed this line anyway, it is not the command's output.
    out = "".join(line for line in out.splitlines(True) if f'__done_"{nonce}"' not in line)
    sys.stdout.write(out)
    return int(m.group(1))


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    path, verb = sys.argv[1], sys.argv[2]
    if verb == "login":
        login(path, sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 120)
        return 0
    if verb == "run":
        return run(path, float(sys.argv[3]), " ".join(sys.argv[4:]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
