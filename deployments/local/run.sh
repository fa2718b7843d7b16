#!/usr/bin/env bash
# Runs Taskmesh as separate processes on one machine against an existing
# Postgres and Kafka, the way a production deployment splits it:
#   DATABASE_URL=postgres://… KAFKA_BROKERS=127.0.0.1:9092 deployments/local/run.sh
# Stop with Ctrl-C. `taskmesh dev` does the same in one process with
# embedded Postgres and Kafka.
set -euo pipefail
: "${DATABASE_URL:?set DATABASE_URL}"
: "${KAFKA_BROKERS:?set KAFKA_BROKERS}"
cd "$(dirname "$0")/../.."
go build -o bin/taskmesh ./services/taskmesh/cmd/taskmesh
state=${STATE_DIR:-.taskmesh/local}
mkdir -p "$state"
[ -s "$state/internal-token" ] || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$state/internal-token"
chmod 600 "$state/internal-token"
export TASKMESH_DATABASE_URL=$DATABASE_URL TASKMESH_KAFKA_BROKERS=$KAFKA_BROKERS
trap 'kill 0' EXIT
bin/taskmesh scheduler --listen 127.0.0.1:9091 --internal-token-file "$state/internal-token" &
bin/taskmesh quota --listen 127.0.0.1:9092 --internal-token-file "$state/internal-token" &
bin/taskmesh gateway --http 127.0.0.1:8080 --grpc 127.0.0.1:9090 --scheduler 127.0.0.1:9091 --quota 127.0.0.1:9092 \
  --internal-token-file "$state/internal-token" &
if [ -n "${AGENT_TOKEN_FILE:-}" ]; then
  bin/taskmesh executor --agent-id local-1 --server 127.0.0.1:9090 --token-file "$AGENT_TOKEN_FILE" \
    --data-dir "$state/agent" --local-api 127.0.0.1:7071 &
fi
wait
