# shellcheck shell=bash
# Summary: What the training templates share: run the payload so that the job survives its time limit
#
# Sourced by slurm/train.sbatch and slurm/train-multinode.sbatch, never run. `run_requeueable COMMAND...`
# runs COMMAND in the background and waits for it. SIGUSR1 (sbatch --signal=B:USR1@120: SLURM signals
# the batch shell alone, before the time limit) and SIGTERM (scancel, the time limit, preemption) are
# passed on to it: the training finishes its step, writes a checkpoint and exits. When it stopped on
# SIGUSR1 the job requeues itself (scontrol requeue: same job id, so afterok dependencies wait for it)
# unless SLURM_RESTART_COUNT has reached DRIVEKIT_MAX_REQUEUES (default 20); the rerun resumes from the
# newest complete checkpoint. SIGTERM alone never requeues (a cancelled job stays cancelled). Exits
# with COMMAND's status; after a success, leaves DRIVEKIT_DONE_DIR/<job id> when that is set
# (bin/pipeline's record for clusters without accounting).

payload=""    # the pid of the training
signalled=""  # the last signal passed on to it
warned=0      # 1 once SIGUSR1 (the time-limit warning) was passed on
caught=0      # 1 when a signal came during the current `wait`

requeue_log() {
  printf '%s: %(%Y-%m-%dT%H:%M:%S)T %s\n' "${TEMPLATE:-requeue}" -1 "$*" >&2
}

# shellcheck disable=SC2329  # called by the traps below
forward() {
  caught=1
  signalled="$1"
  if [[ "$1" == USR1 ]]; then warned=1; fi
  requeue_log "got SIG$1: passing it on to the training (pid ${payload:-not started yet})"
  if [[ -n "$payload" ]]; then kill -s "$1" "$payload" 2>/dev/null || true; fi
}

run_requeueable() {
  local status=0 max="${DRIVEKIT_MAX_REQUEUES:-20}" restarts="${SLURM_RESTART_COUNT:-0}"
  if [[ ! "$max" =~ ^[0-9]+$ ]]; then
    requeue_log "DRIVEKIT_MAX_REQUEUES=$max: give a whole number (0: never requeue)"
    exit 2
  fi
  trap 'forward USR1' USR1
  trap 'forward TERM' TERM
  requeue_log "job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-${HOSTNAME:-?}}, requeued $restarts of at most $max times: $*"
  "$@" &
  payload=$!
  # A trapped signal ends `wait` early (128+n): wait again until the payload itself has ended (bash
  # keeps its status, so a wait after it ended still returns it).
  while :; do
    caught=0
    status=0
    wait "$payload" || status=$?
    ((caught)) || break
  done
  trap - USR1 TERM
  if ((status == 0)); then
    requeue_log "finished"
    if [[ -n "${DRIVEKIT_DONE_DIR:-}" ]]; then touch "$DRIVEKIT_DONE_DIR/${SLURM_JOB_ID:-local}"; fi
    exit 0
  fi
  if ((warned)) && [[ -n "${SLURM_JOB_ID:-}" ]]; then
    if ((restarts >= max)); then
      requeue_log "stopped after SIGUSR1 (exit $status) but requeued $restarts times already (DRIVEKIT_MAX_REQUEUES=$max): not requeued; resubmit the same command to resume"
      exit "$status"
    fi
    requeue_log "stopped after SIGUSR1 (exit $status): requeueing job $SLURM_JOB_ID (requeue $((restarts + 1)) of at most $max); the rerun resumes from the newest complete checkpoint"
    scontrol requeue "$SLURM_JOB_ID" || requeue_log "scontrol requeue $SLURM_JOB_ID failed: resubmit the same command to resume"
  else
    requeue_log "the training exited $status${signalled:+ after SIG$signalled}"
  fi
  exit "$status"
}
