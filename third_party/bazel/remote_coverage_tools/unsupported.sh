#!/bin/sh
echo "coverage is not available in weft's offline Bazel build" >&2
exit 1
