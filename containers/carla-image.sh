#!/bin/sh
# Summary: What the CARLA image's build needs of its base image: where CARLA lies, and Vulkan's NVIDIA ICD file
#
# Usage: carla-image.sh root DIR...
#        carla-image.sh vulkan-icd FILE [ALSO...]
#
# root: prints the first DIR that holds a CARLA release (an executable CarlaUE4.sh and PythonAPI/carla/dist);
# none is one line on stderr and exit 1. Releases lay CARLA out in different places (the carlasim/carla:0.9.16
# image in /workspace, older ones in /home/carla): containers/carla.def asks with both.
#
# vulkan-icd: writes FILE, the NVIDIA Vulkan ICD (driver) manifest naming libGLX_nvidia.so.0, unless FILE or
# one of ALSO exists. Docker's NVIDIA runtime supplies this file at run time; `apptainer exec --nv` binds the
# driver's libraries, libGLX_nvidia.so.0 included, but not this file (apptainer issue 2210), and without it
# every CARLA server exits with "Cannot find a compatible Vulkan driver". The loader reads library_path;
# api_version is the lowest Vulkan version CARLA 0.9.x asks for.
#
# Run by containers/carla.def's %post and %test; tested by tests/test_carla_image.py.
set -eu

PROG="${0##*/}"
ICD_LIBRARY=libGLX_nvidia.so.0
ICD_API_VERSION=1.1.0

usage() {
  echo "usage: $PROG root DIR... | $PROG vulkan-icd FILE [ALSO...]" >&2
  exit 2
}

find_root() {
  for dir in "$@"; do
    if [ -x "$dir/CarlaUE4.sh" ] && [ -d "$dir/PythonAPI/carla/dist" ]; then
      echo "$dir"
      return 0
    fi
  done
  echo "$PROG: no CARLA release in $* (none holds both CarlaUE4.sh and PythonAPI/carla/dist); is the base image a carlasim/carla release?" >&2
  return 1
}

vulkan_icd() {
  file="$1"
  for existing in "$@"; do
    if [ -e "$existing" ]; then
      echo "$PROG: Vulkan ICD file $existing is there; nothing written"
      return 0
    fi
  done
  mkdir -p "$(dirname "$file")"
  printf '{\n  "file_format_version": "1.0.0",\n  "ICD": {\n    "library_path": "%s",\n    "api_version": "%s"\n  }\n}\n' \
    "$ICD_LIBRARY" "$ICD_API_VERSION" > "$file.tmp"
  chmod 0644 "$file.tmp"
  mv "$file.tmp" "$file"
  echo "$PROG: wrote the NVIDIA Vulkan ICD file $file ($ICD_LIBRARY)"
}

[ $# -ge 2 ] || usage
command="$1"
shift
case "$command" in
  root) find_root "$@" ;;
  vulkan-icd) vulkan_icd "$@" ;;
  *) usage ;;
esac
