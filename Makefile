# Generated code under pb/ is committed; `make proto` regenerates it byte for
# byte with Debian's protoc (3.21.12) and the plugins pinned below. pb/ is a
# module of its own (the device SDK's dependency), so the Push API's HTTP
# gateway, which needs grpc-gateway, is generated standalone into the
# server's internal/pushgw.
GO        ?= go
GOBIN     ?= $(shell $(GO) env GOPATH)/bin
PROTOC    ?= protoc
PROTO_INC ?= /usr/include

PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.0
PROTOC_GEN_GATEWAY_VERSION := v2.32.0

PROTOS := $(wildcard pb/*/*.proto)

# `make build` puts the commands in ./bin, stamped with the commit (the Go
# toolchain records none in a git worktree) and the version: vX.Y.Z from the
# VERSION file on the commit tagged so, vX.Y.Z-dev elsewhere (scripts/version.sh).
# TAGS=nodev leaves the embedded backends (etcd server, Kafka, Redis) out.
BIN     ?= bin
TAGS    ?=
COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)$(shell git status --porcelain --untracked-files=no 2>/dev/null | head -c1 | sed 's/.*/+dirty/')
VERSION ?= $(shell ./scripts/version.sh)
LDFLAGS := $(if $(COMMIT),-X github.com/gomsg/gomsg/internal/buildinfo.commit=$(COMMIT)) $(if $(VERSION),-X github.com/gomsg/gomsg/internal/buildinfo.version=$(VERSION))

.PHONY: all build test test-short proto proto-tools proto-check js js-check js-test lint fmt run-dev bench docs
.PHONY: dist dist-tools dist-check image

all: build

# MODULES are the repository's Go modules besides the root one: the device
# protocol's generated code, the device SDK, and the side-by-side comparison
# with Centrifugo and Mosquitto (`gomsg-bench peers`), whose client libraries
# stay out of the other modules.
MODULES := pb client bench/peers

build:
	$(GO) build ./...
	for m in $(MODULES); do (cd $$m && $(GO) build ./...) || exit 1; done
	$(GO) build -tags '$(TAGS)' -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/gomsg ./cmd/gomsgctl ./cmd/gomsg-bench

test:
	./scripts/test.sh

run-dev:
	$(GO) run ./cmd/gomsg dev

lint:
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	$(GO) vet ./...
	for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done

fmt:
	gofmt -w $$(git ls-files '*.go')

proto-tools:
	@command -v $(PROTOC) >/dev/null || (echo "protoc missing: apt-get install protobuf-compiler" && exit 1)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	$(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(PROTOC_GEN_GATEWAY_VERSION)
	$(GO) install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(PROTOC_GEN_GATEWAY_VERSION)

proto: proto-tools
	cd pb && PATH="$(GOBIN):$$PATH" $(PROTOC) -I . -I $(PROTO_INC) \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		$(patsubst pb/%,%,$(PROTOS))
	mkdir -p internal/pushgw
	cd pb && PATH="$(GOBIN):$$PATH" $(PROTOC) -I . -I $(PROTO_INC) \
		--grpc-gateway_out=../internal/pushgw --grpc-gateway_opt=paths=source_relative \
		--grpc-gateway_opt=standalone=true \
		--grpc-gateway_opt=grpc_api_configuration=pushpb/push_http.yaml \
		--openapiv2_out=. --openapiv2_opt=grpc_api_configuration=pushpb/push_http.yaml \
		pushpb/push.proto

# proto-check fails when the committed generated code differs from a fresh run.
proto-check: proto
	git diff --exit-code -- pb/ internal/pushgw/

# The JavaScript client (clients/js) and the demo page's bundle that
# internal/demo embeds are committed too; `make js` regenerates both with the
# npm tools package-lock.json pins (buf compiles the .proto files itself: no
# protoc needed) and builds the package, with Node.js 22 or later
# (scripts/node.sh fetches it when missing).
JS_DIR := clients/js

js:
	bash -c 'source scripts/node.sh && cd $(JS_DIR) && npm ci --no-audit --no-fund && npm run gen && npm run build && npx tsc -p demo && npm run bundle'

# js-check fails when the committed JavaScript code or bundle differs from a fresh run.
js-check: js
	git diff --exit-code -- $(JS_DIR)/src/gen internal/demo/static
	@test -z "$$(git status --porcelain -- $(JS_DIR)/src/gen internal/demo/static)" || \
		(git status --porcelain -- $(JS_DIR)/src/gen internal/demo/static; echo "js-check: files not committed"; exit 1)

# js-test runs the client's unit tests and the browser end-to-end test.
js-test:
	./scripts/browser-test.sh

# docs rewrites the generated sections of docs/ from the code: the
# configuration reference from the flags, the Push API reference from the
# OpenAPI document (run `make proto` first after a .proto change), the metrics
# from internal/metrics. Tests (go test ./cmd/gomsg ./internal/docgen) fail
# while a committed page differs from what this writes.
docs:
	$(GO) run ./cmd/gomsg flags --markdown --write docs/configuration.md
	$(GO) run ./internal/docgen/gen

# ---- Releases ------------------------------------------------------------------
# `make dist` writes the release artefacts of this checkout into $(DIST): per
# platform an archive of gomsg, gomsgctl and gomsg-bench (static, stamped with
# $(VERSION) and the commit, gomsg with the embedded backends of `gomsg dev`), a
# CycloneDX SBOM of each binary, and SHA256SUMS over them (scripts/dist.sh).
# `make dist PLATFORMS=linux/amd64` builds one platform; `make dist-check` checks
# what was built (contents, sums, SBOMs against the binaries, the stamped version,
# and on this machine's platform each binary's `version`). It builds from the
# root module's cmd/... only. `make image` builds the container image with the
# version, commit and OCI labels (needs a Docker engine).
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST      ?= dist
IMAGE     ?= gomsg
CYCLONEDX_GOMOD_VERSION := v1.10.0

dist-tools:
	$(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION)

dist: dist-tools
	GO='$(GO)' DIST='$(DIST)' VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' \
		CYCLONEDX_GOMOD='$(GOBIN)/cyclonedx-gomod' ./scripts/dist.sh $(PLATFORMS)

dist-check:
	$(GO) run ./internal/release/distcheck -dir '$(DIST)' -version '$(VERSION)' $(PLATFORMS)

image:
	docker build --build-arg VERSION='$(VERSION)' --build-arg COMMIT='$(COMMIT)' \
		--build-arg CREATED="$$(git log -1 --format=%cI)" \
		-t '$(IMAGE):$(patsubst v%,%,$(VERSION))' .
