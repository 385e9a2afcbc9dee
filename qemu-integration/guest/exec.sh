#!/bin/sh
# exec.sh CMD [ARG...]: the guest side of `cargo belfry exec`: loads the module (unless
# --no-module), then runs CMD; its status becomes the run's status.
. "$(dirname "$0")/lib.sh"

if [ -n "$BELFRY_MODULE" ]; then
    load_module "insmod" || exit 1
fi
exec "$@"
