# syntax=docker/dockerfile:1
# The console's one image: web, gateway, worker, load-test worker, beat, the simulator
# node and the migrations, picked by the entrypoint's first argument
# (deploy/docker/entrypoint.sh; docs/deployment.md).
#
#   docker build -t token-billing-console .
#   docker run --rm token-billing-console migrate        # once per deploy
#   docker run -p 8000:8000 token-billing-console web
#
# Build stage: the dependencies and the console, at the versions CI tests
# (requirements.lock as a constraints file, as in production: docs/operations.md).
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The lock and the project metadata first: the dependency layer is rebuilt only
# when they change.
COPY requirements.lock pyproject.toml README.md ./
COPY console ./console
COPY accounts ./accounts
COPY usage ./usage
COPY invoicing ./invoicing
COPY gateway_bridge ./gateway_bridge
COPY inference_node ./inference_node
COPY tooling ./tooling
RUN pip install -c requirements.lock '.[otel,sentry]'

# Final stage: the venv and the source tree, run as a non-root user. The processes run
# from /app (PYTHONPATH), as the systemd units run from /srv/console: settings find
# templates, static and locale beside the code (BASE_DIR).
FROM python:3.11-slim
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=console.settings \
    CONSOLE_VAR_DIR=/var/lib/console \
    CONSOLE_STATIC_ROOT=/app/staticfiles \
    GATEWAY_SPOOL_DIR=/var/lib/console/spool
RUN groupadd --system --gid 10001 console \
    && useradd --system --uid 10001 --gid console --home-dir /var/lib/console \
        --shell /usr/sbin/nologin console \
    && mkdir -p /var/lib/console/spool \
    && chown -R console:console /var/lib/console
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=root:root . /app
# Static files collected once, at build (hashed names, gzip and brotli copies:
# console.staticassets), into CONSOLE_STATIC_ROOT inside the image. The settings
# generate throw-away secrets on import: into a scratch var dir, removed after, so no
# secret is ever baked into the image.
RUN CONSOLE_VAR_DIR=/tmp/collect-var python manage.py collectstatic --noinput \
    && rm -rf /tmp/collect-var \
    && chmod 0755 deploy/docker/entrypoint.sh
USER 10001:10001
EXPOSE 8000 9001
ENTRYPOINT ["/app/deploy/docker/entrypoint.sh"]
CMD ["web"]
