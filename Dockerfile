# Multi-stage build: compile in the Rust image, run in a small Debian image as a
# non-root user.
FROM rust:1-bookworm AS build
# librdkafka links the system OpenSSL (TLS and SASL/SCRAM to Kafka).
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY examples ./examples
RUN cargo build --release --locked --bin pgoutbox

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home pgoutbox \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/pgoutbox
COPY --from=build /src/target/release/pgoutbox /usr/local/bin/pgoutbox
# The state file (last LSN confirmed to PostgreSQL, checked against the slot at every
# start) must outlive the container: mount a volume here.
ENV PGOUTBOX_STATE_DIR=/var/lib/pgoutbox
VOLUME ["/var/lib/pgoutbox"]
# /metrics, /livez, /readyz when run with PGOUTBOX_HTTP_ADDR=0.0.0.0:10737 (the
# default listens on the container's loopback only).
EXPOSE 10737
USER 10001
ENTRYPOINT ["/usr/local/bin/pgoutbox"]
CMD ["--help"]
