# syntax=docker/dockerfile:1
# The sriov-stable-cni image for people with Docker: static binaries on an
# empty base. Without a container engine, `make image` builds the same image
# as an OCI archive (tools/mkimage).
#   docker build --build-arg VERSION=v0.1.0 -t REGISTRY/sriov-stable-cni:v0.1.0 .
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
# make build: CGO_ENABLED=0, -trimpath, version stamped; the plugin and the
# agent (the monitor DaemonSet runs it from this image).
RUN make build VERSION=${VERSION} COMMIT=${COMMIT}

FROM scratch
LABEL org.opencontainers.image.title="sriov-stable-cni" \
      org.opencontainers.image.source="https://github.com/sriov-stable-cni/sriov-stable-cni"
COPY --from=build /src/bin/sriov-stable-cni /src/bin/sriov-stable-agent /usr/bin/
ENTRYPOINT ["/usr/bin/sriov-stable-cni", "install"]
CMD ["--cni-bin-dir", "/host/opt/cni/bin", "--wait"]
