#!/bin/sh
# shell.sh: the guest side of `cargo belfry shell`: loads the module (unless --no-module)
# and starts an interactive shell on the console; leaving it powers the guest off.
. "$(dirname "$0")/lib.sh"

if [ -n "$BELFRY_MODULE" ]; then
    load_module "insmod" && note "module loaded: $BELFRY_MODULE"
fi
note "$(belfry_devices | count_lines) Belfry device(s): $(belfry_devices | tr '\n' ' ')"
note "scripts in /belfry/guest (lspci.sh lists the devices); exit or Ctrl-D powers off, Ctrl-C kills QEMU"
exec setsid cttyhack sh -l
