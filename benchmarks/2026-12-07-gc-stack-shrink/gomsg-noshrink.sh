#!/bin/sh
GODEBUG=gcshrinkstackoff=1 exec /tmp/w/gomsg "$@"
