# The front door: `make run` and `make test` do everything on a fresh machine.
.DEFAULT_GOAL := help
SHELL := /bin/bash

.PHONY: help install build run drain gateway test test-fast test-faults test-image test-node24 test-node22-smoke test-unit fuzz broker broker-stop cluster cluster-stop consume refused openapi schemas registry registry-stop bench bench-floor bench-cpu bench-node24 bench-journal bench-refused bench-exactly-once bench-gateway bench-transactions-floor bench-replay bench-value-bytes clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

install: ## npm ci when package-lock.json or patches/ changed (compiles the patched Kafka client once)
	@scripts/install.sh

build: install ## compile TypeScript to dist/
	@npx tsc -p tsconfig.build.json

run: build ## start a local Kafka unless MQ_BROKERS is set, then run the service in the foreground
	@scripts/run.sh

drain: build ## produce every record JOURNAL_DIR=dir holds to MQ_TOPIC (MQ_BROKERS), then exit: 0 once nothing is left (docs/operations.md)
	@test -n "$(JOURNAL_DIR)" || { echo "make drain: name the journal directory: make drain JOURNAL_DIR=dir" >&2; exit 2; }
	@JOURNAL_DIR='$(JOURNAL_DIR)' node dist/src/main.js drain

gateway: ## the reference gateway (nginx + Redis rate limits) on GATEWAY_ADDR (127.0.0.1:8000) in front of UPSTREAM_ADDR (127.0.0.1:8080)
	@scripts/gateway.sh

lint: install ## the lint gate: eslint (typescript-eslint strict and stylistic) and prettier --check; `npm run format` mends the layout
	@npm run --silent lint && echo 'lint: no finding'

test: build lint ## the lint gate, then every test against a real broker (started and stopped when none is configured)
	@scripts/test.sh

test-fast: build ## the unit and integration tests, without the fault suites (the developer's loop)
	@scripts/test.sh --fast

test-faults: build ## the fault tests alone: a 3-broker cluster (started and stopped), brokers and workers killed under load
	@scripts/test.sh test/faults

test-image: build ## the image's root without Docker (Debian 13, Node 24, the Dockerfile's steps), then the service started from it as non-root (minutes the first time)
	@RUN_IMAGE_BUILD_TEST=1 scripts/test.sh test/integration/image-build.test.ts

test-node24: ## make test on Node 24 inside the image's Debian 13 root (.cache/debian13-node24, made the first time: minutes)
	@scripts/test-in-root.sh

test-node22-smoke: ## the smoke test (test/smoke) on Node 22 inside the same root
	@scripts/test-in-root.sh --smoke 22

test-unit: install ## the unit tests alone (no broker needed)
	@npx vitest run test/unit

broker: ## start the local single-node Kafka on 127.0.0.1:9092
	@scripts/kafka.sh start

broker-stop: ## stop the local single-node Kafka
	@scripts/kafka.sh stop

cluster: ## start a 3-broker Kafka cluster on 127.0.0.1:19092,19192,19292
	@scripts/kafka.sh start --cluster

cluster-stop: ## stop the 3-broker cluster
	@scripts/kafka.sh stop --cluster

consume: ## print what the topic holds (key, partition, value), registry formats decoded (MQ_VALUE_FORMAT)
	@if [ "$${MQ_VALUE_FORMAT:-json}" = json ]; then scripts/kafka.sh consume $(MQ_TOPIC); else $(MAKE) --no-print-directory build >/dev/null && node dist/scripts/consume.js; fi

refused: build ## the last requests refused for their content, from MQ_REFUSED_TOPIC, as a table (REFUSED_LAST=20)
	@node dist/scripts/refused.js

# The benchmarks measure the service on the malloc of its image (jemalloc, WORKER_MALLOC=auto).
JEMALLOC := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2:libjemalloc2

bench: build ## the benchmark suite against a local Kafka (about 19 minutes; see bench/README.md)
	@npx tsc -p .
	@scripts/need-packages.sh $(JEMALLOC)
	@scripts/with-broker.sh node dist/bench/run.js

bench-floor: build ## CPU per point of each stage alone: parse, zod, encode, the Kafka client's producer (failure reports only vs a report per message)
	@npx tsc -p .
	@scripts/need-packages.sh $(JEMALLOC)
	@scripts/with-broker.sh node dist/bench/floor.js

bench-cpu: build ## CPU per point of the service under wrk, 1 worker, 100/10/1 points per request (CPU_COMPARE=other/dist/src/main.js: side by side)
	@npx tsc -p .
	@scripts/need-packages.sh wrk:wrk $(JEMALLOC)
	@scripts/with-broker.sh node dist/bench/cpu.js

bench-node24: ## make bench-cpu in the Debian 13 root: this tree on Node 24 against the same tree on Node 20, side by side (CPU_* as for bench-cpu)
	@scripts/test-in-root.sh --tree 20
	@scripts/debian-root.sh run .cache/debian13-node24 --own-network -- env CPU_COMPARE=/src-node20/dist/src/main.js CPU_COMPARE_NODE=/opt/node-20/bin/node make -C /src --no-print-directory bench-cpu

bench-refused: build ## the design load's p99 with and without a flood of 5,000 invalid requests/s beside it, with MQ_REFUSED_TOPIC, without, sent elsewhere, and bare servers (about 11 minutes)
	@npx tsc -p .
	@scripts/need-packages.sh $(JEMALLOC)
	@scripts/with-broker.sh node dist/bench/refused-flood.js

bench-journal: build ## the journal's own CPU per point (append, acknowledgements, marks), both JOURNAL_SYNC modes, no broker (JOURNAL_COMPARE=other/dist/src/journal/journal.js: side by side)
	@npx tsc -p .
	@node dist/bench/journal.js

bench-exactly-once: build ## DELIVERY=exactly-once against the default (and an A/A pair) at the design load: from a 202 to a read_committed consumer (paced load), then vegeta's p99 of the 202 with the reader stopped (about 18 minutes)
	@npx tsc -p .
	@scripts/need-packages.sh $(JEMALLOC)
	@scripts/with-broker.sh node dist/bench/exactly-once.js

bench-transactions-floor: build ## what Kafka transactions cost bare producers with the service's settings (no service): the floor under DELIVERY=exactly-once's CPU (TXF_* in bench/transactions-floor.ts)
	@npx tsc -p .
	@scripts/with-broker.sh node dist/bench/transactions-floor.js

bench-gateway: build ## the reference gateway under vegeta (open loop): rate held, tail, CPU of nginx, Redis and the service per request (GW_* in bench/gateway.ts)
	@npx tsc -p .
	@scripts/need-packages.sh nginx:nginx /usr/lib/nginx/modules/ngx_http_lua_module.so:libnginx-mod-http-lua /usr/share/lua/5.1/nginx/redis.lua:lua-nginx-redis redis-server:redis-server $(JEMALLOC)
	@scripts/need-vegeta.sh >/dev/null
	@scripts/with-broker.sh node dist/bench/gateway.js

bench-replay: build ## how fast a restarted worker, and `drain`, produce again a journal of 1,000,000 points a crash left
	@npx tsc -p .
	@scripts/with-broker.sh node dist/bench/replay.js

bench-value-bytes: build ## bytes per point of each MQ_VALUE_FORMAT (avro, protobuf, json-schema) against json, no broker
	@npx tsc -p .
	@node dist/bench/value-bytes.js

fuzz: build ## 1,000,000 hostile bodies against a running worker: no crash, JSON 4xx answers, RSS curve
	@npx tsc -p .
	@scripts/with-broker.sh node dist/bench/fuzz.js

openapi: build ## regenerate openapi.json from the zod schema
	@node dist/scripts/write-openapi.js

schemas: build ## regenerate schemas/ (the value's Avro, Protobuf and JSON Schema) from the zod schema
	@node dist/scripts/write-schemas.js

registry: ## start the local Schema Registry (Apicurio) on 127.0.0.1:8081, for MQ_VALUE_FORMAT avro, protobuf, json-schema
	@scripts/registry.sh start

registry-stop: ## stop the local Schema Registry
	@scripts/registry.sh stop

clean: ## remove build output, local Kafka data and logs (keeps the jar cache)
	@scripts/kafka.sh stop --all
	rm -rf dist .run
