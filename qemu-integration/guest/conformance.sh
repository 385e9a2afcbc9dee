#!/bin/sh
# conformance.sh: the guest side of `cargo belfry conformance`. It checks the bring-up: every
# expected device is on the bus, insmod binds each one (self-test ok, MSI-X interrupts seen in
# /proc/interrupts, /dev/belfryN) and an lspci-style listing goes to the results channel for the
# golden comparison. Without belfry-conformance in /belfry/bin, rmmod then unbinds everything
# cleanly and a second insmod binds again. With it, it runs the suite against every device
# (each test picks the device whose capabilities it needs), puts its JSON results on the
# results channel framed by BELFRY-CONFORMANCE-BEGIN/END, then the module's fence timeline
# (belfry-timeline) framed by BELFRY-TIMELINE-BEGIN/END, and checks that rmmod still succeeds,
# then loads and removes the module BELFRY_RELOADS times more (this guest's share of the
# launcher's RELOAD_CYCLES; each rmmod leaves the devices on the bus), and (on the debug
# kernel) that kmemleak finds nothing the module leaked in all of that. Each failed check
# prints `CHECK FAILED: reason`; the exit status is non-zero if any check failed.
HERE=$(dirname "$0")
. "$HERE/lib.sh"

# check_present LABEL: the expected number of Belfry devices is on the PCI bus.
check_present() {
    n=0
    for a in $(belfry_devices); do
        n=$((n + 1))
    done
    [ "$n" -eq "$BELFRY_DEVICES" ] ||
        fail "$1: expected $BELFRY_DEVICES Belfry device(s) ($BELFRY_PCI_VENDOR:$BELFRY_PCI_DEVICE) on the PCI bus, found $n"
}

# check_bound LABEL: every device is bound, reported its self-test and took its interrupts. Forks
# a fixed number of processes whatever the number of devices (lib.sh says why).
check_bound() {
    bound=0
    pairs=
    for a in $(belfry_devices); do
        if [ ! -e "$SYSFS/bus/pci/drivers/belfry/$a" ]; then
            fail "$1: $a is not bound to belfry$(module_log "$a")"
            continue
        fi
        bound=$((bound + 1))
        device_irqs "$a"
        if [ -z "$IRQS" ]; then
            fail "$1: $a has no MSI-X interrupts allocated (msi_irqs is empty)"
        fi
        for irq in $IRQS; do
            pairs="$pairs $a=$irq"
        done
    done
    # Each vector's line in /proc/interrupts: requested by belfry, and counted (the self-test
    # interrupt); one reason per line.
    reasons=$(awk -v pairs="$pairs" '
        { key = $1; sub(/:$/, "", key); line[key] = $0 }
        END {
            n = split(pairs, p, " ")
            for (i = 1; i <= n; i++) {
                split(p[i], ai, "="); a = ai[1]; irq = ai[2]
                l = line[irq]
                if (l !~ /belfry/) {
                    printf "%s: IRQ %s is not requested by belfry in /proc/interrupts: \047%s\047\n", a, irq, l
                    continue
                }
                nf = split(l, f, " "); s = 0
                for (j = 2; j <= nf && f[j] ~ /^[0-9]+$/; j++) s += f[j]
                if (s == 0) {
                    gsub(/ +/, " ", l)
                    printf "%s: IRQ %s has count 0 in /proc/interrupts (self-test interrupt not seen): %s\n", a, irq, l
                }
            }
        }' "$PROC/interrupts")
    while IFS= read -r reason; do
        [ -z "$reason" ] || fail "$1: $reason"
    done <<EOF
$reasons
EOF
    # The module prints one `self-test ok on N/N vectors` line per device it binds: their
    # number, then each partial one as N_of_M.
    label=$1
    set -- $(dmesg | awk '
        /self-test ok/ {
            n++
            if (match($0, /self-test ok on [0-9]+\/[0-9]+/)) {
                split(substr($0, RSTART + 16, RLENGTH - 16), v, "/")
                if (v[1] != v[2]) partial = partial " " v[1] "_of_" v[2]
            }
        }
        END { print n + 0 partial }')
    if [ "$1" -ne "$bound" ]; then
        fail "$label: $1 'self-test ok' line(s) in dmesg for $bound bound device(s)$(module_log belfry)"
    fi
    shift
    for p in "$@"; do
        fail "$label: self-test passed on only ${p%%_*} of ${p##*_} vectors"
    done
    count_nodes
    [ "$NODES" -eq "$bound" ] || fail "$label: $NODES /dev/belfry* node(s) for $bound bound device(s)"
}

# check_unbound LABEL: after rmmod nothing of the module is left.
check_unbound() {
    [ ! -e "$SYSFS/bus/pci/drivers/belfry" ] || fail "$1: /sys/bus/pci/drivers/belfry still exists"
    grep -q belfry "$PROC/interrupts" && fail "$1: belfry interrupts still in /proc/interrupts"
    count_nodes
    [ "$NODES" -eq 0 ] || fail "$1: $NODES /dev/belfry* node(s) left"
    grep -q '^belfry ' "$PROC/modules" && fail "$1: belfry still in /proc/modules"
}

# kmemleak (the debug kernel only; the distro kernel has none).
KMEMLEAK=${BELFRY_KMEMLEAK:-$SYSFS/kernel/debug/kmemleak}

# leaks_forget: marks every object kmemleak suspects now as known (boot-time leaks are not
# the module's), so check_leaks sees only what leaked after.
leaks_forget() {
    [ -w "$KMEMLEAK" ] && echo clear >"$KMEMLEAK"
    return 0
}

# check_leaks LABEL: kmemleak finds no unreferenced object allocated since leaks_forget. Two
# scans a few seconds apart, as kmemleak's documentation advises: an object is reported only
# once it has been unreferenced across scans and older than 5 s.
check_leaks() {
    [ -w "$KMEMLEAK" ] || return 0
    echo scan >"$KMEMLEAK"
    sleep 6
    echo scan >"$KMEMLEAK"
    report=$(cat "$KMEMLEAK")
    n=$(echo "$report" | grep -c '^unreferenced object')
    if [ "$n" -gt 0 ]; then
        echo "$report" | head -n 200
        fail "$1: kmemleak found $n unreferenced object(s) (report above)"
    else
        note "$1: kmemleak found no leak"
    fi
}

# emit_listing: the lspci-style listing on the console and, framed, on the results channel.
emit_listing() {
    listing=$("$HERE/lspci.sh")
    echo "$listing"
    if [ -n "$BELFRY_RESULTS" ]; then
        printf '%s\n%s\n%s\n' "$BELFRY_LSPCI_BEGIN" "$listing" "$BELFRY_LSPCI_END" >"$BELFRY_RESULTS"
    else
        printf '%s\n%s\n%s\n' "$BELFRY_LSPCI_BEGIN" "$listing" "$BELFRY_LSPCI_END"
    fi
}

finish() {
    if [ "$FAILURES" -eq 0 ]; then
        note "conformance: all checks passed"
        exit 0
    fi
    note "conformance: $FAILURES check(s) failed"
    exit 1
}

note "expecting $BELFRY_DEVICES Belfry device(s)"
check_present "boot"
if [ -z "$BELFRY_MODULE" ]; then
    note "--no-module: listing the devices without a driver"
    emit_listing
    finish
fi

dmesg -c >/dev/null
leaks_forget
note "insmod $BELFRY_MODULE"
if load_module "first load"; then
    check_bound "first load"
fi
emit_listing

# emit_results FILE: the suite's JSON results, framed, on the results channel.
emit_results() {
    [ -s "$1" ] || return 0
    if [ -n "$BELFRY_RESULTS" ]; then
        { echo BELFRY-CONFORMANCE-BEGIN; cat "$1"; echo BELFRY-CONFORMANCE-END; } >"$BELFRY_RESULTS"
    fi
}

# emit_timeline: the module's fence timeline of every device (belfry-timeline), framed by
# BELFRY-TIMELINE-BEGIN/END on the results channel; the launcher saves it as timeline.txt.
emit_timeline() {
    tool=$(command -v belfry-timeline) || return 0
    if ! "$tool" >/tmp/timeline.txt 2>&1; then
        fail "belfry-timeline failed: $(tail -n 3 /tmp/timeline.txt)"
        return
    fi
    note "fence timeline: $(grep -vc '^#' /tmp/timeline.txt) event(s)"
    if [ -n "$BELFRY_RESULTS" ]; then
        { echo BELFRY-TIMELINE-BEGIN; cat /tmp/timeline.txt; echo BELFRY-TIMELINE-END; } >"$BELFRY_RESULTS"
    fi
}

# run_suite: the in-guest conformance suite and the fence timeline it left, then rmmod must
# still succeed.
run_suite() {
    suite=$(command -v belfry-conformance) || return 0
    # BELFRY_SUITE_ARGS: the tests `conformance --filter` selected (shell-quoted words).
    eval "set -- $BELFRY_SUITE_ARGS"
    note "running $suite${BELFRY_SUITE_ARGS:+ $BELFRY_SUITE_ARGS}"
    "$suite" --results /tmp/conformance.json "$@"
    rc=$?
    emit_results /tmp/conformance.json
    emit_timeline
    [ $rc -eq 0 ] || fail "conformance suite failed (status $rc; its FAIL and SKIP lines and its INCOMPLETE line above)"
    note "rmmod belfry after the suite"
    if out=$(rmmod belfry 2>&1); then
        check_unbound "rmmod after the suite"
    else
        fail "rmmod belfry after the suite failed: $out"
    fi
}

# reload_loop N: N more insmod / bind / rmmod cycles after the suite (the module's probe,
# self-test and remove paths again, on every device; on the debug kernel under KASAN, lockdep
# and kmemleak).
reload_loop() {
    i=1
    while [ "$i" -le "$1" ]; do
        dmesg -c >/dev/null
        load_module "reload loop $i" || return
        check_bound "reload loop $i"
        if out=$(rmmod belfry 2>&1); then
            check_unbound "reload loop $i"
            check_present "reload loop $i"
        else
            fail "reload loop $i: rmmod belfry failed: $out"
            return
        fi
        i=$((i + 1))
    done
    note "reload loop: $1 insmod/rmmod cycle(s)"
}

if [ -z "$(command -v belfry-conformance)" ]; then
    # Without the suite: rmmod unbinds every device cleanly, and a second insmod binds them again.
    if out=$(rmmod belfry 2>&1); then
        check_unbound "after rmmod"
        check_present "after rmmod"
    else
        fail "rmmod belfry failed: $out"
    fi
    dmesg -c >/dev/null
    note "insmod $BELFRY_MODULE again"
    load_module "reload" && check_bound "reload"
    finish
fi
# With the suite, it runs on the first load; the reload loop after it unloads and loads again
# (a load binds sixteen devices, ~3 s each on the debug kernel).
[ "$FAILURES" -eq 0 ] && run_suite
[ "$FAILURES" -eq 0 ] && reload_loop "${BELFRY_RELOADS:-0}"
# One leak check for the suite, its rmmod and the reload loop: kmemleak's reports stay until
# cleared (once at the start), and a leaked object stays unreferenced, so the last scan finds
# every leak an earlier one would have.
check_leaks "after the suite, its rmmod and the reload loop"
finish
