#!/usr/bin/env bash
# The appliance's disk image: tools/appliance/build-image.sh (see there, and docs/appliance.md).
exec "$(dirname "$0")/appliance/build-image.sh" "$@"
