# Mirrorline developer entry points. Every target installs what it needs first.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed-stamp
PROTOS  := $(wildcard proto/mirrorline/v1/*.proto)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# The tag deploy/kubernetes runs; push it where your cluster pulls from (IMAGE=reg/mirrorline:X).
IMAGE   ?= mirrorline:$(VERSION)

.PHONY: install kafka prometheus spark-cds demo image test test-unit test-tansu lint bench proto proto-check clean certs compose-certs

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,spark]'
	touch $(STAMP)

install: $(STAMP)

# Apache Kafka's broker, tools and MirrorMaker 2 from Maven Central (needs Java 17+ and
# Maven), pinned in services/mirrorline/dev/kafka.py; the suite and the bench run on them.
kafka: install
	$(BIN)/mirrorline dev kafka install

# Debian's prometheus package (2.42), unpacked into ~/.cache/mirrorline without root (see
# services/mirrorline/dev/prometheus.py); the dashboards' test runs it.
prometheus: install
	$(BIN)/mirrorline dev prometheus install

# The Spark driver's class-data archive (spark/mirrorline_spark/executor/classdata.py): made
# once per machine into ~/.cache/mirrorline/cds, it halves every later driver start's CPU.
spark-cds: install
	$(BIN)/python -m mirrorline_spark.executor.classdata

demo: install
	$(BIN)/mirrorline dev demo

image:
	docker build -f deploy/Dockerfile -t $(IMAGE) .

test: install kafka prometheus spark-cds
	$(BIN)/pytest -q

# The same suite on the embedded Tansu broker (pip only, no Java).
test-tansu: install
	MIRRORLINE_TEST_BROKER=tansu $(BIN)/pytest -q

test-unit: install
	$(BIN)/pytest -q tests/unit

lint: install
	$(BIN)/ruff check services spark tests bench
	$(BIN)/mypy

bench: install kafka
	$(BIN)/python -m bench
	$(BIN)/python -m bench.control_plane
	$(BIN)/python -m bench.resume
	$(BIN)/python -m bench.probe
	$(BIN)/python -m bench.patterns

# A local CA, service and client certificates and tokens for the gRPC APIs (openssl).
CERTS ?= .mirrorline/certs
certs:
	sh deploy/make-certs.sh $(CERTS)

# The same for docker compose (keys readable by the containers' user).
compose-certs:
	CERT_KEY_MODE=644 sh deploy/make-certs.sh deploy/compose/certs

proto: install
	mkdir -p services/mirrorline/v1 && touch services/mirrorline/v1/__init__.py
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m grpc_tools.protoc -Iproto \
	  --python_out=services --grpc_python_out=services \
	  --mypy_out=services --mypy_grpc_out=services $(PROTOS)

proto-check: proto
	git diff --exit-code -- services/mirrorline/v1 || \
	  (echo "generated protobuf code is stale: run 'make proto' and commit" >&2; exit 1)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
