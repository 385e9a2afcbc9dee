#!/bin/sh
# lspci.sh [ADDR...]: an `lspci -vv -nn`-style listing of each Belfry device (default: all),
# read from sysfs only (vendor, device, class, revision, subsystem, command register, BAR
# sizes from `resource`, MSI/MSI-X vector count, the capability lists walked in `config`,
# the bound driver). Deterministic for a given device configuration: no bus addresses
# beyond the leading one, no IRQ numbers, no BAR addresses.
. "$(dirname "$0")/lib.sh"

size_text() {  # bytes -> 64K / 16M / 1G / 512 (as lspci)
    s=$1
    for unit in G M K; do
        case $unit in G) u=1073741824 ;; M) u=1048576 ;; K) u=1024 ;; esac
        if [ "$s" -ge "$u" ] && [ $((s % u)) -eq 0 ]; then
            echo "$((s / u))$unit"
            return
        fi
    done
    echo "$s"
}

pm() {  # 0 -> "-", else "+"
    if [ "$1" -eq 0 ]; then echo -; else echo +; fi
}

class_name() {
    case $1 in
        0300) echo "VGA compatible controller" ;;
        0301) echo "XGA compatible controller" ;;
        0302) echo "3D controller" ;;
        0380) echo "Display controller" ;;
        *) echo "Class $1" ;;
    esac
}

list_device() {
    a=$1
    d=$SYSFS/bus/pci/devices/$a
    class=$(cat "$d/class")
    class4=$(printf '%04x' $((class >> 8)))
    vendor=$(printf '%04x' $(($(cat "$d/vendor"))))
    device=$(printf '%04x' $(($(cat "$d/device"))))
    rev=$(printf '%02x' $(($(cat "$d/revision"))))
    svendor=$(printf '%04x' $(($(cat "$d/subsystem_vendor"))))
    sdevice=$(printf '%04x' $(($(cat "$d/subsystem_device"))))
    echo "${a#0000:} $(class_name "$class4") [$class4]: Device [$vendor:$device] (rev $rev)"
    echo "	Subsystem: Device [$svendor:$sdevice]"
    cmd=$(($(od -An -tu2 -j4 -N2 "$d/config")))
    echo "	Control: I/O$(pm $((cmd & 1))) Mem$(pm $((cmd & 2))) BusMaster$(pm $((cmd & 4))) DisINTx$(pm $((cmd & 1024)))"

    i=0
    while read -r start end flags; do
        [ $i -le 5 ] || break
        if [ $((start)) -ne 0 ] || [ $((end)) -ne 0 ]; then
            f=$((flags))
            size=$(size_text $((end - start + 1)))
            if [ $((f & 0x100)) -ne 0 ]; then
                echo "	Region $i: I/O ports [size=$size]"
            else
                bits=32-bit
                [ $((f & 0x100000)) -ne 0 ] && bits=64-bit
                pf=non-prefetchable
                [ $((f & 0x2000)) -ne 0 ] && pf=prefetchable
                echo "	Region $i: Memory, $bits, $pf [size=$size]"
            fi
        fi
        i=$((i + 1))
    done <"$d/resource"

    nirq=$(device_irqs "$a" | count_lines)
    echo "	Interrupt vectors allocated: $nirq"

    od -An -v -tu1 "$d/config" | awk '
        { for (i = 1; i <= NF; i++) b[n++] = $i + 0 }
        function w16(o) { return b[o] + 256 * b[o + 1] }
        function w32(o) { return w16(o) + 65536 * w16(o + 2) }
        function pm(x) { return x ? "+" : "-" }
        END {
            if (and(w16(6), 16)) {
                p = and(b[52], 252); guard = 0
                while (p >= 64 && guard++ < 48) {
                    id = b[p]
                    if (id == 1) {
                        printf "\tCapabilities: [%02x] Power Management version %d\n", p, and(w16(p + 2), 7)
                    } else if (id == 5) {
                        c = w16(p + 2)
                        printf "\tCapabilities: [%02x] MSI: Enable%s Count=%d 64bit%s\n", p, pm(and(c, 1)), 2 ^ and(rshift(c, 1), 7), pm(and(c, 128))
                    } else if (id == 16) {
                        c = w16(p + 2); t = and(rshift(c, 4), 15)
                        split("Endpoint,Legacy Endpoint,?,?,Root Port,Upstream Port,Downstream Port,PCI-Express to PCI/PCI-X Bridge,PCI/PCI-X to PCI-Express Bridge,Root Complex Integrated Endpoint,Root Complex Event Collector", names, ",")
                        nm = names[t + 1]
                        if (nm == "" || nm == "?") nm = "type " t
                        printf "\tCapabilities: [%02x] Express (v%d) %s\n", p, and(c, 15), nm
                    } else if (id == 17) {
                        c = w16(p + 2); tb = w32(p + 4); pba = w32(p + 8)
                        printf "\tCapabilities: [%02x] MSI-X: Enable%s Count=%d Masked%s\n", p, pm(and(c, 32768)), and(c, 2047) + 1, pm(and(c, 16384))
                        printf "\t\tVector table: BAR=%d offset=%08x\n", and(tb, 7), tb - and(tb, 7)
                        printf "\t\tPBA: BAR=%d offset=%08x\n", and(pba, 7), pba - and(pba, 7)
                    } else if (id == 9) {
                        printf "\tCapabilities: [%02x] Vendor Specific Information: Len=%02x\n", p, b[p + 2]
                    } else {
                        printf "\tCapabilities: [%02x] Capability ID %02x\n", p, id
                    }
                    p = and(b[p + 1], 252)
                }
            }
            if (n > 256) {
                split("Advanced Error Reporting,Virtual Channel,Device Serial Number,Power Budgeting,Root Complex Link,Root Complex Internal Link,Root Complex Event Collector,Multi-Function VC,Virtual Channel,RCRB,Vendor Specific,?,Access Control Services,Alternative Routing-ID Interpretation,Address Translation Service,Single Root I/O Virtualization,?,Multicast,Page Request Interface,?,Resizable BAR,Dynamic Power Allocation,Transaction Processing Hints,Latency Tolerance Reporting,Secondary PCI Express", ext, ",")
                p = 256; guard = 0
                while (p >= 256 && guard++ < 200) {
                    h = w32(p)
                    if (h == 0 || h == 4294967295) break
                    id = and(h, 65535)
                    name = (id >= 1 && id <= 25 && ext[id] != "?") ? ext[id] : sprintf("Extended Capability ID %04x", id)
                    printf "\tCapabilities: [%03x v%d] %s\n", p, and(rshift(h, 16), 15), name
                    p = and(rshift(h, 20), 4092)
                }
            }
        }'

    if [ -e "$d/driver" ]; then
        drv=$(readlink "$d/driver")
        echo "	Kernel driver in use: ${drv##*/}"
    fi
}

if [ $# -eq 0 ]; then
    set -- $(belfry_devices)
fi
for a in "$@"; do
    list_device "$a"
done
