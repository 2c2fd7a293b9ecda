# The processor image: a static binary on a distroless base, as the Helm
# chart (deploy/helm/weir) runs it. Build: make image (VERSION=...).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/weir-stream/weir/cli.version=${VERSION}" -o /out/processor ./cmd/processor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/processor /processor
USER 65532:65532
EXPOSE 9464
ENTRYPOINT ["/processor"]
