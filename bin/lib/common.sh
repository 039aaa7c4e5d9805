# shellcheck shell=bash
# Summary: What every bin/ wrapper shares: errors, usage, tracing, and how a tool is run
#
# Sourced by the wrappers, never run. Environment:
#   DRIVEKIT_DEBUG=1   trace every command with its file and line (set -x)
#   DRIVEKIT_IMAGES    folder of the Apptainer images (default: containers/ of this checkout)
#   DATA_ROOT          dataset root when no --root is given (passed into the container)
# Passed into a container too (it starts with --cleanenv): CUDA_VISIBLE_DEVICES and every SLURM_* variable
# (SLURM_JOB_GPUS and SLURM_STEP_GPUS name the GPUs a CARLA server renders on; the array task's ids).

if [[ "${DRIVEKIT_DEBUG:-}" == 1 ]]; then
  export PS4='+ ${BASH_SOURCE[0]##*/}:${LINENO}: '
  set -x
fi

PROG="${0##*/}"
DRIVEKIT_HOME="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

abort() {
  echo "$PROG: $*" >&2
  exit 1
}

# The caller's header from its "# Usage:" line to the end of the comment block.
help() {
  sed -n '/^# Usage:/,/^[^#]/{/^#/!d;s/^# \{0,1\}//;p;}' "$0"
}

# The "# Usage:" lines alone, on stderr; exit 2 (wrong usage).
usage_error() {
  sed -n '/^# Usage:/,/^#$/{/^#$/d;s/^# //;p;}' "$0" >&2
  echo "Run '$0 --help' for more." >&2
  exit 2
}

# -h/--help anywhere prints the help; exits 0.
handle_help() {
  local arg
  for arg in "$@"; do
    case "$arg" in
      -h | --help) help; exit 0 ;;
      *) ;;  # every other argument goes to the tool untouched
    esac
  done
}

# Paths a wrapper names for the container beyond its arguments (bin/collect-task: the agent file and
# config its wave's settings name); bound as container_binds binds an argument.
EXTRA_BIND_PATHS=()
# Variables of the caller's environment a wrapper passes into the container when set (apptainer runs with
# --cleanenv): bin/evaluate's LEADERBOARD_ROOT and SCENARIO_RUNNER_ROOT for an agent file in the embedded world.
EXTRA_ENV_VARS=()

# Directories the container must see: the working directory, and every path named in the arguments
# (as ARG or --flag=ARG); a path that does not exist yet is covered by its nearest existing parent.
container_binds() {
  local arg path
  BINDS=("$PWD")
  for arg in "$@"; do
    path="${arg#--*=}"
    [[ "$path" == /* || "$path" == ./* || "$path" == ../* || -e "$path" ]] || continue
    path="$(realpath -m -- "$path")"
    while [[ ! -e "$path" ]]; do path="$(dirname -- "$path")"; done
    [[ -d "$path" ]] || path="$(dirname -- "$path")"
    # An if, not `[[ ... ]] && ...`: as the loop's last command that would make the function return 1
    # for a path under / (say --root /new/data), and `set -e` would end the wrapper without a word.
    if [[ "$path" != / ]]; then BINDS+=("$path"); fi
  done
}

# run_python IMAGE MODULE ARGS...: exec `python -m MODULE ARGS...` inside $DRIVEKIT_IMAGES/IMAGE.sif
# when that image exists and apptainer is on PATH, else on the host: this checkout's .venv when it
# exists, else python3. The arguments pass through untouched either way.
run_python() {
  local image="${DRIVEKIT_IMAGES:-$DRIVEKIT_HOME/containers}/$1.sif"
  shift
  local -a cmd
  if [[ -f "$image" ]] && command -v apptainer >/dev/null 2>&1; then
    container_binds "$@" "${EXTRA_BIND_PATHS[@]}"
    cmd=(apptainer exec --cleanenv --nv --pwd "$PWD" --env PYTHONUNBUFFERED=1)
    local bind var
    local -a slurm_vars
    for bind in "${BINDS[@]}"; do cmd+=(--bind "$bind"); done
    mapfile -t slurm_vars < <(compgen -e SLURM_ || true)
    for var in DATA_ROOT CUDA_VISIBLE_DEVICES "${slurm_vars[@]}" "${EXTRA_ENV_VARS[@]}"; do
      if [[ -n "${!var:-}" ]]; then cmd+=(--env "$var=${!var}"); fi
    done
    cmd+=("$image" python -m "$@")
  else
    local python="$DRIVEKIT_HOME/.venv/bin/python"
    if [[ ! -x "$python" ]]; then
      python="$(command -v python3)" || abort "no $DRIVEKIT_HOME/.venv and no python3 on PATH: run 'make install'"
    fi
    export PYTHONPATH="$DRIVEKIT_HOME${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    cmd=("$python" -m "$@")
  fi
  exec "${cmd[@]}"
}
