# syntax=docker/dockerfile:1
# modelgate: the gateway on Node 24, as a non-root user, with its data in a volume.
#   docker build -t modelgate .
#   docker run -p 8080:8080 -v modelgate-data:/opt/modelgate/data -e MODELGATE_ADMIN_TOKEN=...
#     -e MODELGATE_SERVER_TRUSTED_PROXIES=<your TLS proxy's address> modelgate
# scripts/container-smoke.ts performs these steps in a clean directory (CI runs it), so keep each
# RUN relative to WORKDIR: the script runs them outside a container.
FROM node:24-slim

WORKDIR /opt/modelgate
ENV NODE_ENV=production

# Dependencies first (cached while only the sources change). The install builds the admin app
# into app/dist (the `prepare` script, with vite from the runtime dependencies), so app/ comes too;
# the same script's server bundle waits for the sources (built below).
COPY package.json package-lock.json .npmrc ./
COPY app ./app
COPY scripts/build-server.ts ./scripts/
# npm's cache is a build cache mount: reused between builds, never a layer of the image. The
# `node` package's Node 24 (for machines without one) duplicates the base image's: removed.
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --no-audit --no-fund \
 && rm -rf node_modules/node node_modules/.bin/node

COPY bin ./bin
COPY src ./src
# The server bundle `modelgate` runs (scripts/build-server.ts): less memory and a faster start
# than the sources it is built from.
RUN npm run build:server
# GET /changelog serves it (the target of a deprecation's Link header).
COPY CHANGELOG.md ./

# The SQLite store and the spool files of a stop that could not reach the store live here.
RUN mkdir -p data && chown node:node data
VOLUME /opt/modelgate/data

# Listen on every interface, behind a TLS-terminating proxy (trust_proxy): plain HTTP is then
# served only to the health probes and to a proxy the gateway trusts that says
# X-Forwarded-Proto: https. Trusted are the addresses in server.trusted_proxies; unset, as here,
# loopback peers only, so from outside the container nothing but the probes is served until
# MODELGATE_SERVER_TRUSTED_PROXIES names your proxy (an address or CIDR range, comma-separated;
# compose.yaml names its Caddy). No peer's X-Forwarded-For is believed otherwise. For several
# replicas, set MODELGATE_STORE (postgres://...) and MODELGATE_REDIS (compose.yaml).
ENV MODELGATE_SERVER_HOST=0.0.0.0 \
    MODELGATE_SERVER_PORT=8080 \
    MODELGATE_SERVER_TRUST_PROXY=true \
    MODELGATE_LOG_FORMAT=json
EXPOSE 8080

USER node
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.MODELGATE_SERVER_PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]

# node directly (not npm start): signals reach the gateway, which drains on SIGTERM.
CMD ["node", "bin/modelgate.js", "serve"]
