# Builds the itemops manager image: a static binary on distroless, non-root.
# `make test` builds the same binary the same way (test/image), since an
# image cannot be built everywhere the tests run.
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
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w" -o itemops .
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w" -o cp-plugin ./cmd/cp-plugin

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/itemops .
# Run by init containers to copy plugin binaries out of images without a cp
# (Velero's own, for its built-in plugins).
COPY --from=builder /workspace/cp-plugin .
USER 65532:65532
# Velero plugin binaries are copied here by init containers (an emptyDir in
# the chart and in config/manager).
VOLUME ["/plugins"]
ENTRYPOINT ["/itemops"]
