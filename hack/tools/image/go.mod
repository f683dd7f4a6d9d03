// The image builder of `make image`: go-containerregistry assembles the
// manager image without a Docker engine, and the CA bundle comes from Go's
// copy of the NSS trust store. In a module of its own so that its
// dependencies never move the operator's.
module github.com/itemops/itemops/hack/tools/image

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	golang.org/x/crypto/x509roots/fallback v0.0.0-20261030153154-30a33513ff6d
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
