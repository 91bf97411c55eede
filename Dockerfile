# syntax=docker/dockerfile:1
# Multi-stage, on Node 24 LTS and Debian 13 (glibc 2.41: uWebSockets.js v20.57 needs 2.38). The build
# stage compiles the Kafka client (@confluentinc/kafka-javascript and its librdkafka, patches/ applied)
# and the journal's addon (native/journal-files); compilers, headers and patch(1) stay there. The
# runtime image has Node, the compiled JavaScript, production node_modules and the journal's addon,
# the shared libraries librdkafka links against (OpenSSL 3, zlib, zstd) and jemalloc, which the workers
# run on (WORKER_MALLOC=auto, src/process/allocator.ts), and runs as a non-root user.
# The build steps are scripts/image-build.sh's, which also makes this image's root without Docker
# (`image-build.sh root`: the same Debian 13, Node 24 from the npm registry) and is tested from it.

FROM node:24-trixie-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 make g++ patch libssl-dev zlib1g-dev libzstd-dev ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
COPY scripts/image-build.sh scripts/install.sh scripts/need-packages.sh scripts/build-kafka-client.sh ./scripts/
COPY patches ./patches
COPY native ./native
RUN scripts/image-build.sh deps
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY scripts ./scripts
RUN scripts/image-build.sh compile

FROM node:24-trixie-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3t64 zlib1g libzstd1 libjemalloc2 ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
ENV NODE_ENV=production \
    LISTEN_ADDR=:8080 \
    JOURNAL_DIR=/var/lib/track-ingest/journal
# The write-ahead journal (every accepted point until Kafka acknowledged it) must outlive the
# container: mount a volume here (compose: a named volume; Kubernetes: a PVC per pod, deploy/k8s).
RUN mkdir -p /var/lib/track-ingest/journal && chown -R node:node /var/lib/track-ingest
VOLUME /var/lib/track-ingest/journal
WORKDIR /app
COPY --from=build --chown=node:node /app/node_modules ./node_modules
COPY --from=build --chown=node:node /app/native ./native
COPY --from=build --chown=node:node /app/dist ./dist
COPY --from=build --chown=node:node /app/package.json ./package.json
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s --start-period=10s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
# SIGTERM starts the orderly shutdown: stop listening, empty the journal and flush every producer
# (SHUTDOWN_TIMEOUT_MS, 20 s by default), exit 0. Give the container more than that: docker stop -t 30,
# or stop_grace_period: 30s in compose, terminationGracePeriodSeconds in Kubernetes.
STOPSIGNAL SIGTERM
# `docker run IMAGE` serves; `docker run -v VOLUME:/var/lib/track-ingest/journal IMAGE drain` produces
# what a journal volume holds and exits (docs/operations.md, "A journal left behind").
ENTRYPOINT ["node", "dist/src/main.js"]
CMD []
