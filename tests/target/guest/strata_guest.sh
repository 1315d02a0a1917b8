# Guest-side helpers for Strata's guest scripts (sourced INSIDE the test
# guest from /share, where host_lib.sh's guest_prepare puts this file).

# The checks every guest script makes. Each prints "ok: ..." or "FAIL: ...";
# a failure sets `failed`, which the script exits with.
#   bounded COMMAND...            a command or a script's function, killed after 120 s
#   step DESCRIPTION COMMAND...   the command must succeed (its output shown if not)
#   refused DESCRIPTION COMMAND...  the command must fail; its status is in $refused_rc
#   check DESCRIPTION CONDITION...  a test without output of its own
bounded() { timeout 120 bash -c '"$@"' bounded "$@"; }
step() {
    local what=$1 rc; shift
    bounded "$@" >/tmp/step.out 2>&1; rc=$?
    if [ "$rc" -eq 0 ]; then echo "ok: $what"; return 0; fi
    echo "FAIL: $what (exit $rc)"; sed 's/^/    /' /tmp/step.out | tail -n 30
    failed=1
    return 1
}
refused() {
    local what=$1; shift
    bounded "$@" >/tmp/step.out 2>&1; refused_rc=$?
    if [ "$refused_rc" -ne 0 ] && [ "$refused_rc" -ne 124 ]; then
        echo "ok: $what (exit $refused_rc: $(grep -m1 -i 'fail\|error\|invalid' /tmp/step.out | cut -c1-160))"
        return 0
    fi
    echo "FAIL: $what (exit $refused_rc, expected a refusal)"; sed 's/^/    /' /tmp/step.out | tail -n 30
    failed=1
    return 1
}
check() {
    local what=$1; shift
    if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; failed=1; fi
}

# ext4 is a module the guest image leaves out: the host shares Debian's
# ext4.ko and its dependencies at /share/modules (in load order).
load_ext4() {
    grep -qw ext4 /proc/filesystems && return 0
    modprobe -q ext4 2>/dev/null && grep -qw ext4 /proc/filesystems && return 0
    [ -r /share/modules/order ] || { echo "no /share/modules/order"; return 1; }
    local m n
    while read -r m; do
        n=${m%%.ko*}; n=${n//-/_}
        [ -d "/sys/module/$n" ] && continue
        insmod "/share/modules/$m" || return 1
    done < /share/modules/order
    grep -qw ext4 /proc/filesystems
}
