# tests/gpu/mps.sh -- sourced by run.sh and examples.sh: start and stop a private MPS daemon (pipe
# and log directories under /tmp), so that ranks sharing a GPU run concurrently. Needs `say` and
# $LOGS from the caller. mps_start NAME: start one (NAME: where its log goes under $LOGS) and stop it
# on exit; mps_stop: stop it now (compute-sanitizer does not run under MPS).
MPS=off
mps_stop() {
  if [ "$MPS" = on ]; then
    echo quit | nvidia-cuda-mps-control >/dev/null 2>&1
    # the server's name is longer than the 15 characters pgrep -x can match: match the command line
    for _ in $(seq 50); do pgrep -u "$(id -u)" -f nvidia-cuda-mps-server >/dev/null || break; sleep 0.1; done
    cp -r "$CUDA_MPS_LOG_DIRECTORY" "$LOGS/$MPS_NAME" 2>/dev/null
    MPS=off
  fi
  [ -n "${MPS_DIR:-}" ] && rm -rf "$MPS_DIR"
}
mps_start() {
  MPS_NAME=$1 MPS_DIR=/tmp/purlin-$1-$$
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  trap mps_stop EXIT
  trap 'exit 130' INT TERM
  if command -v nvidia-cuda-mps-control >/dev/null && nvidia-cuda-mps-control -d; then
    MPS=on
    sleep 1
    say "MPS daemon started ($CUDA_MPS_PIPE_DIRECTORY)"
  else
    say "WARNING: MPS not started: ranks sharing a GPU will time-slice (slow, but correct)"
  fi
}
