# Builds the itemops manager image with a Docker engine: a static binary on
# distroless, non-root. `make image` builds the same image without one
# (hack/image.sh); test/image checks that both build the manager alike.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY main.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
COPY cmd/ cmd/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o itemops .
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o cp-plugin ./cmd/cp-plugin
RUN mkdir plugins

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title="itemops" \
      org.opencontainers.image.description="Follows the asynchronous operations of Velero's plugins as ItemOperations" \
      org.opencontainers.image.source="https://github.com/itemops/itemops" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
WORKDIR /
COPY --from=builder /workspace/itemops .
# Run by init containers to copy plugin binaries out of images without a cp
# (Velero's own, for its built-in plugins).
COPY --from=builder /workspace/cp-plugin .
# Velero plugin binaries are copied here by init containers (an emptyDir in
# the chart and in config/manager); group 0 may write it, as for any user a
# platform assigns with group 0 (OpenShift's restricted-v2).
COPY --from=builder --chown=65532:0 --chmod=0775 /workspace/plugins /plugins
USER 65532:65532
VOLUME ["/plugins"]
ENTRYPOINT ["/itemops"]
