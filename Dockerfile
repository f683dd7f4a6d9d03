# Builds the itemops manager image: a static binary on distroless, non-root.
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
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w" -o itemops .

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/itemops .
USER 65532:65532
ENTRYPOINT ["/itemops"]
