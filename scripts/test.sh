#!/usr/bin/env bash
# The test command: installs what the tests need when it is missing
# (redis-server from Debian, as root), then runs every test with -race.
# Usage: scripts/test.sh [extra go test args]
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/apt.sh
# Tests start their own Redis servers on free ports; the package's own
# service is not needed.
command -v redis-server >/dev/null 2>&1 || apt_install test.sh redis-server
# The MQTT transport is cross-checked against Debian's mosquitto_sub (the
# test fails without it).
command -v mosquitto_sub >/dev/null 2>&1 || apt_install test.sh mosquitto-clients
# The NATS tests that kill and restart a server run Debian's nats-server as a
# process of their own (the in-process one cannot be killed from outside).
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_install test.sh nats-server

if [ -n "$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" ]; then
  echo "test.sh: gofmt would change:" >&2
  gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go') >&2
  exit 1
fi
go vet ./...
go test -race -count=1 -timeout 15m "$@" ./...
# The device SDK and the protocol's generated code are modules of their own
# (the SDK's tests against the services are in internal/sdktest, above).
for m in pb client; do
  (cd "$m" && go vet ./... && go test -race -count=1 -timeout 5m "$@" ./...)
done

# The side-by-side comparison (`gomsg-bench peers`) is a module of its own,
# which keeps the peers' client libraries out of the others. Its tests run
# Centrifugo and Mosquitto for real: --install-only builds Centrifugo into the
# user's cache (a few minutes, once) and installs Debian's mosquitto (its own
# service is kept from starting) when missing.
go run ./cmd/gomsg-bench peers --install-only
(cd bench/peers && go vet ./... && go test -race -count=1 -timeout 15m "$@" ./...)

# The JavaScript client: its unit tests and the browser end-to-end test (the
# demo page of a real gomsg dev in headless Chromium; installs Chromium and
# the npm packages when missing).
./scripts/browser-test.sh
# The packed npm package, installed into a scratch project, against gomsg dev.
./scripts/js-pack-test.sh

# Deployment files (Dockerfile, docker-compose.yml, the Helm chart) are checked
# offline by their own module, which keeps compose-go, Helm and the Kubernetes
# API types out of the main module. It builds gomsg and reads its flags.
(cd deploy/validate && go vet ./... && go test -count=1 -timeout 10m ./...)
