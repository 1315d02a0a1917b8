# Guest-side helpers for Strata's guest scripts (sourced INSIDE the test
# guest from /share, where host_lib.sh's guest_prepare puts this file).

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
