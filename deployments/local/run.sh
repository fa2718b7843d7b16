#!/usr/bin/env bash
# Runs Taskmesh as separate processes on one machine, the way a production
# deployment splits it: Postgres and a Kafka-protocol broker, Redis for the
# rate limits, the scheduler, the quota service, the consumers service
# (audit log, usage, webhooks), two gateways (one rate-limit and credential
# store, any gateway serves any client) and two executor agents registered
# with `taskmesh ctl agents register`. From a clean clone it needs Go, the
# PostgreSQL server binaries and Redis (apt-get install -y postgresql
# redis-server):
#
#   deployments/local/run.sh
#
# Postgres and the broker come from `taskmesh dev --infra-only` unless you
# give your own, and Redis from redis-server unless you give REDIS_URL:
#
#   DATABASE_URL=postgres://… KAFKA_BROKERS=127.0.0.1:19092 REDIS_URL=redis://127.0.0.1:6379/0 deployments/local/run.sh
#
# Without redis-server and REDIS_URL each gateway limits in its own memory
# (the script says so), so a tenant gets its limit from each.
#
# Addresses: gateways REST 127.0.0.1:8080 and :8081, gRPC :9090 and :9093;
# scheduler :9091, quota :9092, consumers :9094; the agents' local APIs
# :7071 and :7072; Redis :16379. NO_BUILD=1 runs the binaries already in
# bin/. State (tokens, keys, journals) is kept in $STATE_DIR
# (.taskmesh/local). Stop with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${NO_BUILD:-}" ]; then
  go build -o bin/taskmesh ./services/taskmesh/cmd/taskmesh
  # The agents' shim, static: a shim host starts once per agent (once per
  # task with --shim-per-task), and a static binary skips the dynamic
  # loader (docs/executor.md "The shim binary").
  CGO_ENABLED=0 go build -trimpath -o bin/taskmesh-shim ./services/executor/cmd/taskmesh-shim
  # The pipeline's stage worker, which starts twice per stage
  # (docs/api/pipeline.md "Stage workers").
  CGO_ENABLED=0 go build -trimpath -o bin/taskmesh-stage ./services/executor/cmd/taskmesh-stage
fi
state=${STATE_DIR:-.taskmesh/local}
mkdir -p "$state"
trap 'kill 0' EXIT

if [ -z "${DATABASE_URL:-}" ]; then
  rm -f "$state/infra/database-url" "$state/infra/kafka-brokers"
  bin/taskmesh dev --infra-only --data-dir "$state/infra" --pg-port "${PG_PORT:-54339}" --kafka-port "${KAFKA_PORT:-19093}" &
  for _ in $(seq 600); do [ -s "$state/infra/kafka-brokers" ] && break; sleep 0.1; done
  DATABASE_URL=$(cat "$state/infra/database-url")
  KAFKA_BROKERS=$(cat "$state/infra/kafka-brokers")
fi
: "${KAFKA_BROKERS:?set KAFKA_BROKERS together with DATABASE_URL}"

secret() { [ -s "$1" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$1"; chmod 600 "$1"; }
secret "$state/internal-token"
secret "$state/objects-secret"
secret "$state/webhook-key"

# The gateways share their rate limits through Redis; the URL goes to them
# in a file, as one may hold a password.
if [ -z "${REDIS_URL:-}" ] && command -v redis-server >/dev/null; then
  redis-server --port "${REDIS_PORT:-16379}" --bind 127.0.0.1 --save '' --appendonly no >"$state/redis.log" 2>&1 &
  REDIS_URL=redis://127.0.0.1:${REDIS_PORT:-16379}/0
fi
limits=() limits_note="per gateway (no Redis)"
if [ -n "${REDIS_URL:-}" ]; then
  (umask 077; printf '%s' "$REDIS_URL" > "$state/redis-url")
  limits=(--redis-url-file "$state/redis-url") limits_note="shared by the gateways through Redis"
else
  echo "redis-server not found and REDIS_URL not set: each gateway limits in its own memory (apt-get install -y redis-server)" >&2
fi
export TASKMESH_DATABASE_URL=$DATABASE_URL TASKMESH_KAFKA_BROKERS=$KAFKA_BROKERS
export TASKMESH_INTERNAL_TOKEN_FILE=$state/internal-token
objects=(--objects-fs-root "$state/objects" --objects-fs-base-url http://127.0.0.1:8080/objects
         --objects-fs-secret-file "$state/objects-secret")

bin/taskmesh quota --listen 127.0.0.1:9092 &
# --pipeline serves the model-conversion jobs (/jobs); the agents' pool
# labels let them run its stages.
bin/taskmesh scheduler --listen 127.0.0.1:9091 --quota 127.0.0.1:9092 --objects fs "${objects[@]}" --pipeline &
bin/taskmesh consumers --listen 127.0.0.1:9094 --objects fs "${objects[@]}" --webhook-key-file "$state/webhook-key" &
for n in 1 2; do
  http=$((8079 + n)); grpc=$((9087 + 3 * n))   # 8080/9090 and 8081/9093
  bin/taskmesh gateway --http "127.0.0.1:$http" --grpc "127.0.0.1:$grpc" --scheduler 127.0.0.1:9091 \
    --quota 127.0.0.1:9092 --consumers 127.0.0.1:9094 --admin-key-file "$state/admin-key" "${objects[@]}" "${limits[@]}" &
  for _ in $(seq 300); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
done

export TASKMESH_ADMIN_KEY=$(cat "$state/admin-key")
for n in 1 2; do
  grpc=$((9087 + 3 * n)) other=$((9087 + 3 * (3 - n)))
  # Register once; the token file is then the agent's credential.
  [ -s "$state/agent-$n.token" ] ||
    bin/taskmesh ctl --server "127.0.0.1:$grpc" agents register "local-$n" --token-file "$state/agent-$n.token"
  # Each agent starts on its own gateway and moves to the other when its
  # own goes away (it stays there while that one answers).
  bin/taskmesh executor --agent-id "local-$n" --machine-id "local-$n" --server "127.0.0.1:$grpc,127.0.0.1:$other" \
    --token-file "$state/agent-$n.token" --data-dir "$state/agent-$n" --local-api "127.0.0.1:$((7070 + n))" \
    --labels pool:onnx,pool:bie,pool:nef \
    --log-dir "$state/agent-$n/log" &
done

cat <<BANNER

Taskmesh is running as separate processes.
  REST     http://127.0.0.1:8080  http://127.0.0.1:8081
  gRPC     127.0.0.1:9090  127.0.0.1:9093
  Agents   local-1, local-2        (taskmesh ctl agents list; logs in $state/agent-N/log)
  Limits   $limits_note
  APIs     audit log, usage and webhooks through the consumers service (:9094)
  Operator key in $state/admin-key (export TASKMESH_ADMIN_KEY=\$(cat $state/admin-key))

Create a tenant and a key, then submit:
  bin/taskmesh ctl tenants create acme && bin/taskmesh ctl keys create --tenant acme
Press Ctrl-C to stop.
BANNER
wait
