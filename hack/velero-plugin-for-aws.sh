#!/usr/bin/env bash
# Builds the unmodified velero-plugin-for-aws binary from the Go module proxy
# into a per-machine cache and prints its path (see hack/cached-binary.sh).
# Tests use it as a third-party Velero plugin that nobody here wrote.
# ITEMOPS_AWS_PLUGIN, when set to an executable, wins and nothing is built.
exec "$(dirname "$0")/cached-binary.sh" velero-plugin-for-aws
