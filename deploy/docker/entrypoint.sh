#!/bin/sh
# The console image's entrypoint: one image, every process kind. The first argument
# picks the kind; each runs exactly the command of its Procfile entry and
# deploy/systemd unit (docs/operations.md, docs/deployment.md):
#
#   web | gateway  uvicorn console.asgi:application (the console, its API and the
#                  gateway on one port: PORT, default 8000; WEB_CONCURRENCY processes,
#                  default 4). Same program: web and gateway are two Deployments
#                  of it so that each scales on its own; the ingress splits the paths.
#   worker         celery -A console worker (CELERY_CONCURRENCY, default 4)
#   loadtests      celery -A console worker on CAPACITY_QUEUE (default loadtests),
#                  CAPACITY_WORKER_CONCURRENCY processes (default 1)
#   beat           celery -A console beat: exactly one per deployment (the beat lock)
#   simulator|node the bundled simulator node on NODE_PORT (default 9001), all addresses
#   migrate        manage.py migrate --noinput: once per deploy, before the others start
#   await-migrations  waits until manage.py migrate --check finds nothing unapplied
#                  (a Kubernetes init container: the pods wait for the migrations Job)
#   manage ARGS    manage.py ARGS (createsuperuser, reseal_secrets, check --deploy ...)
#   anything else  run as given (sh, python ...)
#
# CONSOLE_ENTRYPOINT_DRY_RUN=1 prints the command it would run, one argument a
# line, instead of running it (tests/deploy/test_entrypoint.py).
set -eu

run() {
    if [ -n "${CONSOLE_ENTRYPOINT_DRY_RUN:-}" ]; then
        printf '%s\n' "$@"
        exit 0
    fi
    exec "$@"
}

if [ "$#" -eq 0 ]; then
    set -- web
fi

kind=$1
shift

case "$kind" in
web | gateway)
    run uvicorn console.asgi:application \
        --http console.server:GuardedHttpProtocol \
        --host 0.0.0.0 --port "${PORT:-8000}" --workers "${WEB_CONCURRENCY:-4}" \
        --lifespan on --no-access-log --no-proxy-headers "$@"
    ;;
worker)
    run celery -A console worker -l info --concurrency "${CELERY_CONCURRENCY:-4}" "$@"
    ;;
loadtests)
    run celery -A console worker -l info -Q "${CAPACITY_QUEUE:-loadtests}" \
        --concurrency "${CAPACITY_WORKER_CONCURRENCY:-1}" "$@"
    ;;
beat)
    run celery -A console beat -l info "$@"
    ;;
simulator | node)
    run python -m tooling.simulator --host 0.0.0.0 --port "${NODE_PORT:-9001}" \
        --profile realistic "$@"
    ;;
migrate)
    run python manage.py migrate --noinput "$@"
    ;;
await-migrations)
    run sh -c 'until python manage.py migrate --check --noinput > /dev/null; do echo "await-migrations: not applied yet, retrying in 5 s" >&2; sleep 5; done'
    ;;
manage)
    run python manage.py "$@"
    ;;
*)
    run "$kind" "$@"
    ;;
esac
