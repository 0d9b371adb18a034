# Floe agent image: `docker build -t floe:0.1.0 .` then
#   docker run -e FLOE_CLUSTER_ID=demo -p 9092:9092 -p 9644:9644 floe:0.1.0   # embedded SQLite + ./data (a demo)
#   docker run -e FLOE_METASTORE=postgresql://... -e FLOE_OBJECTS=s3://bucket/prefix?region=... \
#              -e FLOE_CLUSTER_ID=<cluster id> -e FLOE_ADVERTISED_HOST=<address clients use> floe:0.1.0
# TLS/SASL (docs/operations.md "Security"): FLOE_LISTENERS=SASL_SSL://0.0.0.0:9092 with
#   FLOE_SSL_CERTFILE/FLOE_SSL_KEYFILE paths; given TLS_CERT_PEM/TLS_KEY_PEM (what ECS injects
#   from Secrets Manager) `floe agent` writes the PEMs to those paths (0600) first.
#   FLOE_INTERNAL_TOKEN (shared by all agents) guards the admin port's internal routes.
# Configuration is the FLOE_* environment (docs/operations.md); the same image
# runs the compactor (`floe compactor run`) and the CLI (`floe topics ...`).

# `--build-arg WITH_SPARK=true` adds PySpark and a Java runtime, so the same image
# runs `floe compactor run --spark` (the default image stays slim without them).
ARG WITH_SPARK=false

# -- build: the project and its dependencies in a virtualenv ----------------------
FROM python:3.11-slim AS build
ARG WITH_SPARK

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY kafka_protocol ./kafka_protocol
COPY objectstore ./objectstore
COPY metastore ./metastore
COPY agent ./agent
COPY compactor ./compactor
COPY floe_cli ./floe_cli
RUN python -m venv /opt/floe \
    && /opt/floe/bin/pip install --upgrade pip \
    && /opt/floe/bin/pip install . \
    && if [ "$WITH_SPARK" = "true" ]; then /opt/floe/bin/pip install "pyspark>=4.2"; fi \
    && /opt/floe/bin/floe version

# -- runtime: slim, non-root --------------------------------------------------------
FROM python:3.11-slim
ARG WITH_SPARK

RUN if [ "$WITH_SPARK" = "true" ]; then \
        apt-get update && apt-get install -y --no-install-recommends default-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi

RUN groupadd --system --gid 10001 floe \
    && useradd --system --uid 10001 --gid floe --home-dir /var/lib/floe --create-home \
       --shell /usr/sbin/nologin floe

COPY --from=build /opt/floe /opt/floe

# The Amazon RDS CA bundle: the Terraform module's metastore DSN connects with
# sslmode=verify-full&sslrootcert=/etc/floe/rds-global-bundle.pem.
ARG RDS_CA_BUNDLE_URL=https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem
ADD --chmod=644 ${RDS_CA_BUNDLE_URL} /etc/floe/rds-global-bundle.pem

# `floe agent` runs one worker process per CPU (FLOE_WORKERS), all sharing port 9092;
# they advertise 9092 too (each worker's own port is not published by `docker run -p`).
# Set FLOE_ADVERTISED_PORT with FLOE_PORT, or to the published host port.
ENV PATH=/opt/floe/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    FLOE_HOST=0.0.0.0 \
    FLOE_PORT=9092 \
    FLOE_ADVERTISED_PORT=9092 \
    FLOE_ADMIN_PORT=9644

# `floe agent` without FLOE_METASTORE/FLOE_OBJECTS keeps its data in ./data here.
WORKDIR /var/lib/floe
USER 10001:10001

# Kafka listener, admin HTTP (/healthz, /readyz, /metrics open; /blocks, /kafka, planning need FLOE_INTERNAL_TOKEN).
EXPOSE 9092 9644

HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FLOE_ADMIN_PORT', '9644'), timeout=3)"]

ENTRYPOINT ["floe"]
CMD ["agent"]
