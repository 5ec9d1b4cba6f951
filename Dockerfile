# syntax=docker/dockerfile:1
#
# One image for every gomsg service; the command picks the service:
#   docker run gomsg boat | station | carrier | horn
# (gomsg is built with -tags nodev: the embedded etcd, Kafka and Redis of
# `gomsg dev` are left out, a third of the binary; `dev` needs a build without
# the tag, or real backends through --redis-addrs/--kafka-brokers/--etcd-endpoints)
# and gomsgctl, the example client, is in the image too:
#   docker run --entrypoint /gomsgctl gomsg push --uid alice hello
#
# Both binaries are static (CGO_ENABLED=0) and run as the distroless
# "nonroot" user (65532). The image has no shell: container health checks
# run `/gomsg healthcheck --url http://127.0.0.1:9090/readyz`.

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
# The protocol's generated code (pb) and the device SDK (client) are modules
# of their own that go.mod replaces with these directories.
COPY go.mod go.sum ./
COPY pb/go.mod pb/go.sum ./pb/
COPY client/go.mod client/go.sum ./client/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The build has no .git: `make image` stamps the version and commit and dates
# the image at the commit, as
#   docker build --build-arg VERSION=$(scripts/version.sh) --build-arg COMMIT=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) .
# Without VERSION the binaries say the VERSION file's release with -dev and
# the image's version label is empty.
ARG VERSION=
ARG COMMIT=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    STAMP="-X github.com/gomsg/gomsg/internal/buildinfo.version=${VERSION} -X github.com/gomsg/gomsg/internal/buildinfo.commit=${COMMIT}" && \
    go build -tags nodev -ldflags "-s -w ${STAMP}" -o /out/gomsg ./cmd/gomsg && \
    go build -ldflags "-s -w ${STAMP}" -o /out/gomsgctl ./cmd/gomsgctl

FROM gcr.io/distroless/static-debian12:nonroot
# An ARG ends with its stage: the labels need their own.
ARG VERSION=
ARG COMMIT=
ARG CREATED=
LABEL org.opencontainers.image.title="gomsg" \
      org.opencontainers.image.description="gomsg, a distributed push service: boat, station, carrier and horn (the command picks one)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/gomsg/gomsg" \
      org.opencontainers.image.url="https://github.com/gomsg/gomsg" \
      org.opencontainers.image.documentation="https://github.com/gomsg/gomsg#readme" \
      org.opencontainers.image.licenses="MIT"
COPY --from=build /out/gomsg /out/gomsgctl /
USER nonroot:nonroot
# 7100 client stream (boat), 7180 its WebSocket, 7110 boat internal, 7200/7280 Push API gRPC/HTTP
# (station), 7210 station internal, 9090 ops: /metrics /healthz /readyz.
EXPOSE 7100 7110 7180 7200 7210 7280 9090
ENTRYPOINT ["/gomsg"]
CMD ["help"]
