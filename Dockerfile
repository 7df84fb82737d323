# syntax=docker/dockerfile:1
# LiteHit service image.
#
#   docker build -t litehit .
#   docker run -p 127.0.0.1:50051:50051 -p 127.0.0.1:9464:9464 -v litehit-data:/data litehit
#
# Protected by default: listening on 0.0.0.0 without an admin token, the server creates one
# at its first start in /data/admin-token (mode 0600, kept in the volume; the log names the
# file, never the token) and every admin RPC needs it; reads, queries and health stay open:
#   docker exec CONTAINER cat /data/admin-token
#   OptimizerClient("127.0.0.1:50051", admin_token=TOKEN)        # Python
#   grpcurl -H "authorization: Bearer TOKEN" -plaintext ...       # grpcurl
# LITEHIT_ADMIN_TOKEN_FILE (e.g. a mounted secret) replaces it; LITEHIT_OPEN_ADMIN=true
# leaves admin RPCs open (a WARNING at every start).
#
# Stage 1 builds a wheel of this project only (dependencies are resolved in stage 2);
# stage 2 is a slim runtime that installs the wheel and runs as an unprivileged user.
# Extra `litehit serve` settings go in environment variables (e.g. LITEHIT_ADMIN_TOKEN,
# LITEHIT_GROUPS); any other subcommand can replace the default one:
#   docker run --rm litehit instances --server host:50051

FROM python:3.11-slim AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN pip wheel --no-deps --wheel-dir /wheels .

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg \
    NUMBA_CACHE_DIR=/home/litehit/.cache/numba
RUN groupadd --system --gid 10001 litehit \
 && useradd --system --uid 10001 --gid litehit --create-home --home-dir /home/litehit \
        --shell /usr/sbin/nologin litehit \
 && mkdir -p /data \
 && chown litehit:litehit /data
COPY --from=builder /wheels/ /tmp/wheels/
# Compile every numba kernel once (litehit warm-up: every family of the registry's
# KERNEL_FAMILIES), into the runtime user's cache, so a container neither
# compiles at start nor needs a writable site-packages (this line from an empty cache:
# 13.8 s, then 0.8 s cached; 2026-12-04, 2 cores, load 2.4: bench/README.md, issue 21).
RUN pip install /tmp/wheels/*.whl \
 && rm -rf /tmp/wheels \
 && litehit warm-up \
 && chown -R litehit:litehit /home/litehit/.cache

USER litehit
WORKDIR /home/litehit
# Registry (SQLite) lives here; a new named volume inherits the litehit ownership above.
VOLUME ["/data"]
# 50051: gRPC (OptimizerService, health, reflection); 9464: Prometheus /metrics.
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
    CMD ["litehit", "health", "--server", "127.0.0.1:50051"]
ENTRYPOINT ["litehit"]
CMD ["serve", "--listen", "0.0.0.0:50051", "--metrics-listen", "0.0.0.0:9464", "--data-dir", "/data"]
